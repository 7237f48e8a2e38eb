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
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine/admin"
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
	VisibleAt  string          `json:"visibleAt"`
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
	q, err := openQueue(ctx, st, b, queueRead)
	if err != nil {
		return err
	}
	defer q.Close()
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
		if asJSON {
			js, err := supervisor.MarshalCompact(m)
			if err != nil {
				return n, err
			}
			fmt.Fprintln(c.app.stdout, js)
		} else {
			fmt.Fprintf(c.app.stdout, "id=%d attempt=%d type=%s enqueued=%s visible=%s\n%s\n",
				m.ID, m.Attempt, m.Type, m.EnqueuedAt, m.VisibleAt, m.Payload)
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
