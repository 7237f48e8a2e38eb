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

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine/admin"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
	"github.com/localcloud/localcloud/internal/supervisor"
	"github.com/localcloud/localcloud/notify"
)

// stmtTail reads the messages after the last id tail printed. ids grow
// (AUTOINCREMENT), so "id > last" is exactly what arrived since. It reads
// like peek: nothing is claimed or changed.
const stmtTail = `SELECT id, attempt, enqueued_at, visible_at, payload_type, payload_data FROM messages
WHERE id > ?1 ORDER BY id LIMIT ?2`

// stmtTailLast is the newest id, where tail starts without --existing.
const stmtTailLast = `SELECT COALESCE(MAX(id), 0) FROM messages`

// tailBatch is how many messages one read returns; more follow at once.
const tailBatch = 100

// tailPoll is the fallback poll when no hint arrives (jittered), as the
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
	// VisibleAt is "" on a jetstream queue (the server holds lease ends).
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
	if b.Engine == config.EngineJetStream {
		return c.tailJetStream(ctx, st, b, *existing, *max, *asJSON)
	}
	q, closeQueue, err := openQueue(ctx, st, b, queueRead)
	if err != nil {
		return err
	}
	defer closeQueue()
	ctx, stop := c.app.interruptible(ctx)
	defer stop()

	var last int64
	if !*existing {
		if err := admin.QueueDB(q).R.QueryRowContext(ctx, stmtTailLast).Scan(&last); err != nil {
			return fmt.Errorf("read queue %s: %w", b.Name, err)
		}
	}
	// Woken by up's hints when it runs (never needed for correctness:
	// the poll below finds everything too).
	wake := make(chan struct{}, 1)
	if rt, running, err := supervisor.Probe(st.DataDir); err == nil && running && rt != nil && rt.NATSURL != "" {
		unwatch, err := notify.Watch(ctx, rt.NATSURL, st.Notify.Token, config.Subject(st.Name, b.Name), func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
		if err == nil {
			defer unwatch()
		}
	}
	fmt.Fprintf(c.app.stderr, "tailing queue %s (Ctrl-C stops); messages are shown, never claimed\n", b.Name)
	printed := 0
	for {
		n, err := c.tailRead(ctx, q, b.Name, &last, *asJSON, *max-printed, *max > 0)
		printed += n
		if errors.Is(err, context.Canceled) {
			return &exitCodeError{code: 130}
		}
		if err != nil {
			return err
		}
		if *max > 0 && printed >= *max {
			return nil
		}
		if n == tailBatch {
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

// tailRead prints the messages after *last (at most left when limited) and
// moves *last on.
func (c *queueCommand) tailRead(ctx context.Context, q *queue.Queue, binding string, last *int64, asJSON bool, left int, limited bool) (int, error) {
	limit := tailBatch
	if limited && left < limit {
		limit = left
	}
	rows, err := admin.QueueDB(q).R.QueryContext(ctx, stmtTail, *last, limit)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("read queue %s: %w", binding, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var m queueTailJSON
		var enq, vis int64
		if err := rows.Scan(&m.ID, &m.Attempt, &enq, &vis, &m.Type, &m.Payload); err != nil {
			return n, fmt.Errorf("read queue %s: %w", binding, err)
		}
		m.Binding, m.Bytes = binding, len(m.Payload)
		m.EnqueuedAt, m.VisibleAt = fmtTime(time.UnixMilli(enq)), fmtTime(time.UnixMilli(vis))
		if m.Type == string(queue.TypeJSON) && json.Valid([]byte(m.Payload)) {
			m.JSON = json.RawMessage(m.Payload)
		}
		if err := c.printTail(m, asJSON); err != nil {
			return n, err
		}
		*last = m.ID
		n++
	}
	if err := rows.Err(); err != nil {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		return n, fmt.Errorf("read queue %s: %w", binding, err)
	}
	return n, nil
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

// tailJetStream is tail on a jetstream queue: it reads the stream after the
// last sequence it printed (jsengine.Tail), never touching the consumer.
// The ids are stream sequences. It wakes on the queue's own subject (a core
// NATS subscription sees every publish to it), else polls every second.
// Attempt is 1 for a message delivered before the read, else 0, and
// visibleAt is "" (JetStream's server holds lease ends).
func (c *queueCommand) tailJetStream(ctx context.Context, st *config.Stack, b config.Binding, existing bool, max int, asJSON bool) error {
	nc, err := dialJetStream(ctx, st, b)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := needStream(ctx, st, b, nc); err != nil {
		return err
	}
	ctx, stop := c.app.interruptible(ctx)
	defer stop()
	var last uint64
	if !existing {
		if last, err = jsengine.LastSeq(ctx, nc, b.Name); err != nil {
			return fmt.Errorf("read queue %s: %w", b.Name, err)
		}
	}
	wake := make(chan struct{}, 1)
	if sub, err := nc.Subscribe("lcq."+b.Name, func(*nats.Msg) {
		select {
		case wake <- struct{}{}:
		default:
		}
	}); err == nil {
		defer sub.Unsubscribe()
	}
	fmt.Fprintf(c.app.stderr, "tailing queue %s (stream %s; Ctrl-C stops); messages are shown, never claimed\n", b.Name, supervisor.StreamName(b))
	printed := 0
	for {
		limit := tailBatch
		if max > 0 {
			limit = min(limit, max-printed)
		}
		msgs, err := jsengine.Tail(ctx, nc, b.Name, last, limit)
		if ctx.Err() != nil {
			return &exitCodeError{code: 130}
		}
		if err != nil {
			return fmt.Errorf("read queue %s: %w", b.Name, err)
		}
		for _, pm := range msgs {
			m := queueTailJSON{Binding: b.Name, ID: pm.ID, Attempt: pm.Attempt, Type: pm.Payload.Type, Payload: pm.Payload.Data,
				Bytes: len(pm.Payload.Data), EnqueuedAt: fmtTime(pm.EnqueuedAt)}
			if m.Type == string(queue.TypeJSON) && json.Valid([]byte(m.Payload)) {
				m.JSON = json.RawMessage(m.Payload)
			}
			if err := c.printTail(m, asJSON); err != nil {
				return err
			}
			last = uint64(pm.ID)
			printed++
		}
		if max > 0 && printed >= max {
			return nil
		}
		if len(msgs) == limit {
			continue
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
