package sqlitetools

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	qdriver "github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/engine/moverec"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// QueueMover reads and writes the queue's file for localcloud migrate
// (sqlitequeue's migrate.go). A SQLite store is read without claiming, so
// lease is unused.
func (h *handle) QueueMover(context.Context, time.Duration) (engine.QueueMover, error) {
	if h.eq == nil {
		return nil, fmt.Errorf("binding %s is a %s binding, not a queue", h.b.Name, h.b.Type)
	}
	return &mover{h: h, q: h.eq}, nil
}

type mover struct {
	h     *handle
	q     *sqlitequeue.Queue
	after int64
}

func (m *mover) Source() string { return "sqlite:" + m.h.b.Path }

func (m *mover) Leased(ctx context.Context) (int64, time.Time, error) { return m.q.Leased(ctx) }

func (m *mover) Export(ctx context.Context, max int) ([]moverec.Message, error) {
	ms, err := m.q.Export(ctx, m.after, max)
	if len(ms) > 0 {
		m.after = ms[len(ms)-1].ID
	} else {
		m.after = 0 // the next round starts over
	}
	return ms, err
}

func (m *mover) Remove(ctx context.Context, ids []int64) error { return m.q.Remove(ctx, ids, false) }
func (m *mover) Release()                                      {}

func (m *mover) Dedups(ctx context.Context) ([]moverec.Dedup, error) { return m.q.Dedups(ctx) }
func (m *mover) ClearDedup(ctx context.Context) error                { return m.q.Remove(ctx, nil, true) }

func (m *mover) Imported(ctx context.Context, source string) (map[int64]int64, error) {
	return m.q.Imported(ctx, source)
}

func (m *mover) Import(ctx context.Context, source string, ms []moverec.Message, done map[int64]int64) error {
	if err := m.q.Import(ctx, source, ms); err != nil {
		return err
	}
	got, err := m.q.Imported(ctx, source)
	if err != nil {
		return err
	}
	for k, v := range got {
		done[k] = v
	}
	return nil
}

func (m *mover) ImportDedup(ctx context.Context, ds []moverec.Dedup, ids map[int64]int64) error {
	return m.q.ImportDedup(ctx, ds, ids)
}

func (m *mover) ReadBack(ctx context.Context, ids []int64) (map[int64]qdriver.Payload, error) {
	out := map[int64]qdriver.Payload{}
	for _, id := range ids {
		var p qdriver.Payload
		var attrs sql.NullString
		err := m.h.db.R.QueryRowContext(ctx, `SELECT payload_type, payload_data,
(SELECT a.attributes FROM lc_attributes a WHERE a.message_id = messages.id) FROM messages WHERE id = ?1`, id).Scan(&p.Type, &p.Data, &attrs)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read back message %d: %w", id, err)
		}
		if attrs.String != "" {
			p.Attrs = []byte(attrs.String)
		}
		out[id] = p
	}
	return out, nil
}

func (m *mover) Close() error { return nil }

// DropEmpty keeps the store: an empty file counts as empty wherever it is
// looked at (engine.Holds).
func (Tools) DropEmpty(context.Context, *engine.Env, config.Binding) error { return nil }

// Remove deletes the folder of a queue the SQS API created.
func (Tools) Remove(_ context.Context, _ *engine.Env, b config.Binding) error {
	if !b.Created || b.Path == "" {
		return fmt.Errorf("remove the store of binding %s: only a queue created through the SQS API is removed, never a binding of the stack file", b.Name)
	}
	if err := os.RemoveAll(b.Path); err != nil {
		return fmt.Errorf("remove the store of queue %s: %w", b.Name, err)
	}
	return nil
}
