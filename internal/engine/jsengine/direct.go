package jsengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// A batched direct get tells AckBatch which of a batch's messages are
// still stored when the stream's deleted list is too long for a presence
// (presence.go): a queue with delayed sends keeps its first sequence at
// the oldest schedule, so every message acked after it stays on the list
// (issue 22: Consume behind 100,000 delayed sends ran at up to 2.3x the
// plain queue's time per message with a get per message). One request
// ($JS.API.DIRECT.GET.<stream>, batch, next_by_subj the due subject) from
// the batch's lowest sequence returns the stored due messages in stream
// order. First without headers (the server then builds none per message):
// an answer of as many messages as the batch's range [lo, hi] has
// sequences, whose end-of-batch status names hi as the last, shows every
// sequence of the range stored on the due subject: all held (Consume's
// acks come in such runs). Else again with headers: a receipt's message is
// held if its sequence comes back; the end-of-batch status says how far
// the answer reached (no more pending: to the stream's end; else to its
// last sequence), and the rest is asked again from there, up to
// directRounds requests; what is still not covered then is read with a
// get each.
//
// Direct gets are answered by every replica of a stream, followers too,
// which need not have applied the latest acks or sends (not
// read-your-writes, jetstream-notes.md). So only a stream of one replica
// has AllowDirect on (its one server is its leader), and a replicated
// queue keeps the presence and the gets, read from the leader.

// directBatch is the most messages one direct get asks for (a variable
// for the tests); directBytes the most payload bytes (the server stops
// after the message that passes it); directRounds the most requests one
// AckBatch sends.
var directBatch uint64 = 256

const (
	directBytes  = 1 << 20
	directRounds = 4
)

// directGets turns the direct reads off for the tests (they then cover
// the get per message); directReads counts the AckBatch reads they served.
var (
	directGets  atomic.Bool
	directReads atomic.Int64
)

func init() { directGets.Store(true) }

// directState is whether the handle's stream answers direct gets: set at
// Open from the stream's configuration (AllowDirect, one replica), and
// dropped when no server answered one (the configuration changed).
type directState struct {
	on atomic.Bool
}

// errNoDirect: no server answered a direct get.
var errNoDirect = errors.New("no server answers direct gets")

// directHeld reports which of seqs the stream holds on the queue's
// subject: seqs[k] is held iff held[k]. ok is false when direct gets are
// off (the caller reads otherwise); an error is a failed read.
func (q *Queue) directHeld(ctx context.Context, seqs []uint64) (held []bool, ok bool, err error) {
	if !q.direct.on.Load() || !directGets.Load() || len(seqs) == 0 {
		return nil, false, nil
	}
	order := make([]int, len(seqs)) // indexes of seqs, by sequence
	for k := range order {
		order[k] = k
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case seqs[a] < seqs[b]:
			return -1
		case seqs[a] > seqs[b]:
			return 1
		}
		return 0
	})
	held = make([]bool, len(seqs))
	// First without headers (the server then makes none per message):
	// when the answer is as many messages as the range has sequences and
	// ends at its last, every sequence of it is a stored due message.
	lo, hi := seqs[order[0]], seqs[order[len(order)-1]]
	if span := hi - lo + 1; span <= directBatch {
		rctx, cancel := context.WithTimeout(ctx, readTry)
		r, err := q.directRange(rctx, lo, int(span), nil)
		cancel()
		if errors.Is(err, errNoDirect) {
			q.direct.on.Store(false)
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		if r.count == int(span) && r.last == hi {
			for k := range held {
				held[k] = true
			}
			directReads.Add(1)
			return held, true, nil
		}
	}
	next := 0 // order[next:] not yet covered
	for round := 0; next < len(order) && round < directRounds; round++ {
		lo := seqs[order[next]]
		found := map[uint64]bool{}
		rctx, cancel := context.WithTimeout(ctx, readTry)
		r, err := q.directRange(rctx, lo, int(min(hi-lo+1, directBatch)), found)
		cancel()
		if errors.Is(err, errNoDirect) {
			q.direct.on.Store(false)
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		for next < len(order) && seqs[order[next]] <= r.reach {
			held[order[next]] = found[seqs[order[next]]]
			next++
		}
	}
	rest := order[next:]
	err = parallel(len(rest), func(k int) error {
		i := rest[k]
		h, err := q.exists(ctx, seqs[i])
		held[i] = h
		return err
	})
	if err != nil {
		return nil, false, err
	}
	directReads.Add(1)
	return held, true, nil
}

// directAnswer is what one batched direct get returned: reach, the
// highest sequence it covers (every due message stored from its first
// sequence through reach came back); count, the messages; last, the
// sequence of the last one.
type directAnswer struct {
	reach, last uint64
	count       int
}

// directRange sends one batched direct get of up to n due messages from
// sequence lo. With found it asks for the messages' headers and records
// their sequences in found; without, it asks for none (then only count,
// last and a reach of "all" when none is stored from lo on are known).
func (q *Queue) directRange(ctx context.Context, lo uint64, n int, found map[uint64]bool) (directAnswer, error) {
	reply := nats.NewInbox()
	ch := make(chan *nats.Msg, n+2)
	sub, err := q.nc.ChanSubscribe(reply, ch)
	if err != nil {
		return directAnswer{}, fmt.Errorf("read stream %s: %w", q.stream, err)
	}
	defer sub.Unsubscribe()
	req, err := json.Marshal(struct {
		Seq       uint64 `json:"seq"`
		NextFor   string `json:"next_by_subj"`
		Batch     int    `json:"batch"`
		MaxBytes  int    `json:"max_bytes"`
		NoHeaders bool   `json:"no_hdr,omitempty"`
	}{lo, q.subject, n, directBytes, found == nil})
	if err != nil {
		return directAnswer{}, fmt.Errorf("read stream %s: %w", q.stream, err)
	}
	if err := q.nc.PublishRequest("$JS.API.DIRECT.GET."+q.stream, reply, req); err != nil {
		return directAnswer{}, fmt.Errorf("read stream %s: %w", q.stream, err)
	}
	var a directAnswer
	fail := func(format string, args ...any) (directAnswer, error) {
		return directAnswer{}, fmt.Errorf("read stream %s: a direct get from %d: %s", q.stream, lo, fmt.Sprintf(format, args...))
	}
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return fail("%v", ctx.Err())
		}
		switch status := m.Header.Get("Status"); {
		case status == "" && a.count < n:
			a.count++
			if found == nil {
				continue
			}
			seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
			if err != nil || seq < lo || seq <= a.last {
				return fail("a message with sequence %q", m.Header.Get("Nats-Sequence"))
			}
			found[seq], a.last = true, seq
		case status == "404" && a.count == 0: // none stored from lo on
			a.reach = math.MaxUint64
			return a, nil
		case status == "204": // end of the batch
			if found == nil {
				last, err := strconv.ParseUint(m.Header.Get("Nats-Last-Sequence"), 10, 64)
				if err != nil || a.count == 0 || last < lo {
					return fail("an end of batch after %d messages with last sequence %q", a.count, m.Header.Get("Nats-Last-Sequence"))
				}
				a.last = last
				return a, nil
			}
			switch {
			case m.Header.Get("Nats-Num-Pending") == "0":
				a.reach = math.MaxUint64 // none stored after the last
			case a.count == 0:
				return fail("an empty batch with messages pending")
			default:
				a.reach = a.last
			}
			return a, nil
		case status == "503":
			return directAnswer{}, errNoDirect
		default:
			return fail("status %q %q after %d messages", status, m.Header.Get("Description"), a.count)
		}
	}
}
