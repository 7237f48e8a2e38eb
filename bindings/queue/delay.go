package queue

import (
	"time"

	"github.com/localcloud/localcloud/bindings"
)

// MaxDelay is the longest WithDelay: the same bound as a lease
// (MaxVisibility), so "hidden until" is limited the same way whether a
// message waits for its first delivery, for a retry or for a consumer.
const MaxDelay = 12 * time.Hour

// SendOption changes one Send or SendBatch.
type SendOption interface{ applySend(*sendOptions) }

// NackOption changes one Nack.
type NackOption interface{ applyNack(*nackOptions) }

type sendOptions struct {
	delay     time.Duration
	keys      []string // WithDedupKey, WithDedupKeys
	keysBatch bool     // keys came from WithDedupKeys
	keysSet   bool
	result    *SendResult
	attrs     []Attributes // WithAttributes
	attrsSet  bool
}

type nackOptions struct{ delay time.Duration }

// DelayOption is both a SendOption and a NackOption; see WithDelay.
type DelayOption struct{ d time.Duration }

func (o DelayOption) applySend(s *sendOptions) { s.delay = o.d }
func (o DelayOption) applyNack(n *nackOptions) { n.delay = o.d }

// WithDelay makes a sent message, or a nacked one, due d from now instead
// of at once: visible_at = now + d, rounded up to a whole millisecond, in
// the spec's columns (a spec-exact reader sees a message that is not due
// yet). d is 0..MaxDelay; a negative or longer delay is INVALID_INPUT and
// nothing is written. A delayed message keeps its place by enqueued_at, the
// time of the send: once due, it is delivered in (enqueued_at, id) order
// among the due messages, ahead of later sends.
func WithDelay(d time.Duration) DelayOption { return DelayOption{d: d} }

func validDelay(d time.Duration) error {
	if d < 0 || d > MaxDelay {
		return bindings.Errorf(bindings.CodeInvalidInput, "delay: must be between 0s and %s, got %s", MaxDelay, d)
	}
	return nil
}

func buildSendOptions(opts []SendOption) (sendOptions, error) {
	var o sendOptions
	for _, fn := range opts {
		if fn != nil {
			fn.applySend(&o)
		}
	}
	return o, validDelay(o.delay)
}

func buildNackOptions(opts []NackOption) (nackOptions, error) {
	var o nackOptions
	for _, fn := range opts {
		if fn != nil {
			fn.applyNack(&o)
		}
	}
	return o, validDelay(o.delay)
}
