package main

// queue tail: print a queue's new messages as they arrive, without claiming
// them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	qdriver "github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/supervisor"
)

// tailBatch is how many messages one read returns; more follow at once.
const tailBatch = 100

// tailPoll is the fallback poll when no wake-up arrives (jittered), as the
// consumers' own.
const tailPoll = time.Second

// queueTailJSON is one line of queue tail --json (JSON Lines).
type queueTailJSON struct {
	Binding    string          `json:"binding"`
	ID         int64           `json:"id"`
	Attempt    int             `json:"attempt"`
	Type       string          `json:"type"`
	Payload    string          `json:"payload"`
	JSON       json.RawMessage `json:"json,omitempty"`
	Bytes      int             `json:"bytes"`
	EnqueuedAt string          `json:"enqueuedAt"`
	// VisibleAt is "" on an engine that keeps lease ends to itself
	// (jetstream).
	VisibleAt string `json:"visibleAt"`
}

func (c *queueCommand) tail(ctx context.Context, args []string) error {
	fs, file, asJSON := queueFlags("tail")
	existing := fs.Bool("existing", false, "print the messages already in the queue first")
	max := fs.Int("max", 0, "stop after `N` messages (default: run until Ctrl-C)")
	pos, err := parseWantArgs(fs, args, 1, 1, "BINDING")
	if err != nil {
		return err
	}
	if *max < 0 {
		return &usageError{msg: fmt.Sprintf("--max must be at least 1, got %d", *max), try: "localcloud queue tail BINDING --max 10"}
	}
	st, b, err := c.app.findBinding(*file, pos[0], config.TypeQueue)
	if err != nil {
		return err
	}
	h, closeQueue, err := openBinding(ctx, st, b, engine.Read)
	if err != nil {
		return err
	}
	defer closeQueue()
	t, err := toolsOf(b)
	if err != nil {
		return err
	}
	ctx, stop := c.app.interruptible(ctx)
	defer stop()

	var last int64
	if !*existing {
		if last, err = h.LastID(ctx); err != nil {
			return fmt.Errorf("read queue %s: %w", b.Name, err)
		}
	}
	// Woken when a message may have arrived (up's hints, the stream's
	// subject); never needed for correctness: the poll below finds
	// everything too.
	wake := make(chan struct{}, 1)
	if unwatch, err := h.Arrivals(ctx, func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}); err == nil {
		defer unwatch()
	}
	fmt.Fprintf(c.app.stderr, "tailing queue %s (%s; Ctrl-C stops); messages are shown, never claimed\n", b.Name, t.Where(b))
	printed := 0
	for {
		limit := tailBatch
		if *max > 0 {
			limit = min(limit, *max-printed)
		}
		msgs, err := h.Tail(ctx, last, limit)
		if ctx.Err() != nil || errors.Is(err, context.Canceled) {
			return &exitCodeError{code: 130}
		}
		if err != nil {
			return fmt.Errorf("read queue %s: %w", b.Name, err)
		}
		for _, pm := range msgs {
			if err := c.printTail(tailJSON(b.Name, pm), *asJSON); err != nil {
				return err
			}
			last = pm.ID
			printed++
		}
		if *max > 0 && printed >= *max {
			return nil
		}
		if len(msgs) == limit {
			continue // more are waiting
		}
		poll := time.NewTimer(tailPoll/2 + rand.N(tailPoll))
		select {
		case <-ctx.Done():
			poll.Stop()
			return &exitCodeError{code: 130}
		case <-wake:
		case <-poll.C:
		}
		poll.Stop()
	}
}

// tailJSON is one message of tail. An engine that keeps lease ends to
// itself gives no VisibleAt ("").
func tailJSON(binding string, pm qdriver.PeekedMessage) queueTailJSON {
	m := queueTailJSON{Binding: binding, ID: pm.ID, Attempt: pm.Attempt, Type: pm.Payload.Type, Payload: pm.Payload.Data,
		Bytes: len(pm.Payload.Data), EnqueuedAt: fmtTime(pm.EnqueuedAt)}
	if !pm.VisibleAt.IsZero() {
		m.VisibleAt = fmtTime(pm.VisibleAt)
	}
	if m.Type == string(queue.TypeJSON) && json.Valid([]byte(m.Payload)) {
		m.JSON = json.RawMessage(m.Payload)
	}
	return m
}

// printTail prints one message of tail.
func (c *queueCommand) printTail(m queueTailJSON, asJSON bool) error {
	if asJSON {
		js, err := supervisor.MarshalCompact(m)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(c.app.stdout, js)
		return err
	}
	vis := m.VisibleAt
	if vis == "" {
		vis = "-"
	}
	_, err := fmt.Fprintf(c.app.stdout, "id=%d attempt=%d type=%s enqueued=%s visible=%s\n%s\n",
		m.ID, m.Attempt, m.Type, m.EnqueuedAt, vis, m.Payload)
	return err
}
