package queue

import (
	"time"

	"github.com/localcloud/localcloud/bindings"
)

// Limits and defaults of idempotent sends.
const (
	// MaxDedupKeyBytes is the longest dedup key (the KV key limit).
	MaxDedupKeyBytes = 512
	// DefaultDedupWindow is how long a dedup key is remembered
	// (WithDedupWindow, the binding's dedupWindow).
	DefaultDedupWindow = 5 * time.Minute
	// MinDedupWindow and MaxDedupWindow bound the dedup window.
	MinDedupWindow = time.Millisecond
	MaxDedupWindow = 7 * 24 * time.Hour
)

// SendResult tells what a Send or SendBatch with WithSendResult did.
type SendResult struct {
	// Duplicate[i] reports that message i carried a dedup key sent within
	// the dedup window already, so nothing was added for it.
	Duplicate []bool
	// Added counts the messages stored.
	Added int
	// IDs[i] is message i's id as every Receive, Consume and Peek of it
	// shows it (Message.ID), or 0: for a duplicate, and where the engine
	// cannot know it at the send (the JetStream engine's delayed sends,
	// which the server stores when they are due).
	IDs []int64
}

// dedupOption is WithDedupKey and WithDedupKeys.
type dedupOption struct {
	keys  []string
	batch bool
}

func (o dedupOption) applySend(s *sendOptions) {
	s.keys, s.keysBatch, s.keysSet = o.keys, o.batch, true
}

// WithDedupKey makes a Send idempotent: if a message with the same key was
// sent to this queue within its dedup window (WithDedupWindow, the
// binding's dedupWindow, default 5m) by any handle of any process, even one
// that has since restarted, the Send adds nothing and succeeds
// (WithSendResult tells). The key is 1..MaxDedupKeyBytes bytes of
// A-Z a-z 0-9 - _ : . like a KV key. For SendBatch use WithDedupKeys.
func WithDedupKey(key string) SendOption { return dedupOption{keys: []string{key}} }

// WithDedupKeys gives each message of a SendBatch its dedup key, in slice
// order ("" for a message without one); see WithDedupKey. The batch is
// all-or-none for the messages it adds; duplicates are left out.
func WithDedupKeys(keys ...string) SendOption {
	return dedupOption{keys: append([]string(nil), keys...), batch: true}
}

type resultOption struct{ r *SendResult }

func (o resultOption) applySend(s *sendOptions) { s.result = o.r }

// WithSendResult fills *r when the Send or SendBatch succeeds: the new
// messages' ids, which messages were duplicates of a dedup key
// (WithDedupKey) and how many were added. A duplicate is a success, not an error, so that a retrying sender
// needs no special case; callers that care ask with this option.
func WithSendResult(r *SendResult) SendOption { return resultOption{r: r} }

// validDedupKey checks a dedup key like a KV key.
func validDedupKey(field, key string) error {
	if len(key) == 0 || len(key) > MaxDedupKeyBytes {
		return bindings.Errorf(bindings.CodeInvalidInput,
			"%s: must be 1 to %d bytes, got %d bytes", field, MaxDedupKeyBytes, len(key))
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == ':', c == '.':
		default:
			shown := key
			if len(shown) > 64 {
				shown = shown[:64] + "..."
			}
			return bindings.Errorf(bindings.CodeInvalidInput,
				"%s: may hold only A-Z a-z 0-9 - _ : . but byte %d is %q in %q", field, i, c, shown)
		}
	}
	return nil
}

func validDedupWindow(d time.Duration) error {
	if d < MinDedupWindow || d > MaxDedupWindow {
		return bindings.Errorf(bindings.CodeInvalidInput, "dedup window: must be between %s and %s, got %s", MinDedupWindow, MaxDedupWindow, d)
	}
	return nil
}
