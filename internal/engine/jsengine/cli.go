package jsengine

// Helpers for the localcloud command line, which checks its input before
// it acts and tails a queue without consuming.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// ValidReceipt reports whether s is a receipt that the jetstream queue
// called name could have issued. Ack and Nack treat any other string as
// never issued, a no-op success (as the format specifies); the CLI checks
// first so that it never reports an ack that did not happen.
func ValidReceipt(name, s string) bool {
	q := &Queue{name: name, stream: "LCQ_" + name}
	_, ok := q.parseReceipt(s)
	return ok
}

// Tail reads up to limit messages of the jetstream queue called name that
// are due (on the queue's subject, so not the delayed sends still waiting
// for their schedule) with a stream sequence above after, in stream order,
// without touching the consumer: the reads of `localcloud queue tail`.
// Attempt is 1 for a message the consumer has delivered, else 0, as Peek
// approximates it; VisibleAt is zero (the server holds lease ends).
func Tail(ctx context.Context, nc *nats.Conn, name string, after uint64, limit int) ([]driver.PeekedMessage, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, "LCQ_"+name)
	if err != nil {
		return nil, fmt.Errorf("open stream LCQ_%s: %w", name, err)
	}
	var delivered uint64
	if cons, err := st.Consumer(ctx, consumerName); err == nil {
		if ci, err := cons.Info(ctx); err == nil {
			delivered = ci.Delivered.Stream
		}
	}
	var out []driver.PeekedMessage
	for seq := after + 1; len(out) < limit; {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject("lcq."+name))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("read stream LCQ_%s: %w", name, err)
		}
		seq = m.Sequence + 1
		pm := driver.PeekedMessage{ID: int64(m.Sequence), EnqueuedAt: m.Time,
			Payload: payloadOf(m.Header, m.Data)}
		if v, err := strconv.ParseInt(m.Header.Get(hdrEnqueued), 10, 64); err == nil {
			pm.EnqueuedAt = time.UnixMilli(v)
		}
		if m.Sequence <= delivered {
			pm.Attempt, pm.Delivered = 1, true
		}
		out = append(out, pm)
	}
	return out, nil
}

// LastSeq is the last stream sequence of the jetstream queue called name:
// where `localcloud queue tail` starts without --existing.
func LastSeq(ctx context.Context, nc *nats.Conn, name string) (uint64, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	st, err := js.Stream(ctx, "LCQ_"+name)
	if err != nil {
		return 0, fmt.Errorf("open stream LCQ_%s: %w", name, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("read stream LCQ_%s: %w", name, err)
	}
	return info.State.LastSeq, nil
}
