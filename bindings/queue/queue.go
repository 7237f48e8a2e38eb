// Package queue is localcloud's queue binding: the localqueue.v1 store format
// (one SQLite file, <dir>/localqueue.sqlite) with leases, receipts that go
// stale on redelivery, and FIFO order by (enqueued_at, id). Any number of
// handles and OS processes may share one queue; each message is delivered
// to exactly one receiver per lease.
package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// Limits and defaults of the localqueue.v1 binding.
const (
	MaxPayloadBytes   = 65536
	MaxReceiveBatch   = 10
	DefaultVisibility = 30 * time.Second
	MinVisibility     = time.Millisecond
	MaxVisibility     = 12 * time.Hour
)

// FileName is the database file inside a queue store directory.
const FileName = "localqueue.sqlite"

// Marker is the format identifier in the meta table.
const Marker = "localqueue.v1"

// Schema is the provider DDL of localqueue.v1, exactly as the spec writes it.
const Schema = `CREATE TABLE IF NOT EXISTS messages (
id INTEGER PRIMARY KEY AUTOINCREMENT,
payload_type TEXT NOT NULL, -- "json" | "text"
payload_data TEXT NOT NULL, -- serialized JSON for "json", raw string for "text"
enqueued_at INTEGER NOT NULL, -- unix epoch MILLISECONDS
visible_at INTEGER NOT NULL, -- unix epoch MILLISECONDS; due when <= now
attempt INTEGER NOT NULL DEFAULT 0, -- delivery count, incremented per receive
receipt_handle TEXT -- UUID of the CURRENT delivery, NULL if never delivered
);
CREATE INDEX IF NOT EXISTS idx_messages_visible ON messages (visible_at, enqueued_at, id);`

// OrderIndex is localcloud's own index. The spec's index leads with
// visible_at, so the spec's receive select scans and sorts every due row
// (O(backlog) per receive). This one is in delivery order and covers
// visible_at, so a receive reads only the rows it returns plus the in-flight
// rows ahead of them. A spec-exact reader ignores it.
const OrderIndex = `CREATE INDEX IF NOT EXISTS lc_messages_order ON messages (enqueued_at, id, visible_at);`

var format = sqlstore.Format{
	Marker: Marker,
	File:   FileName,
	Schema: Schema,
	Extra:  OrderIndex,
	OpCode: bindings.CodeQueueOperationFailed,
}

// Format returns the description of localqueue.v1 used by the store plumbing.
func Format() sqlstore.Format { return format }

// The spec's statements.
const (
	stmtSend = `INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES (?1, ?2, ?3, ?3, 0)`
	stmtDue   = `SELECT id, enqueued_at FROM messages WHERE visible_at <= ?1 ORDER BY enqueued_at, id LIMIT ?2`
	stmtAny   = `SELECT 1 FROM messages WHERE visible_at <= ?1 LIMIT 1`
	stmtClaim = `UPDATE messages
SET visible_at = ?1, attempt = attempt + 1,
receipt_handle = ?2 WHERE id = ?3
RETURNING payload_type, payload_data, attempt`
	stmtAck    = `DELETE FROM messages WHERE id = ?1 AND receipt_handle = ?2`
	stmtNack   = `UPDATE messages SET visible_at = ?3 WHERE id = ?1 AND receipt_handle = ?2`
	stmtExists = `SELECT 1 FROM messages WHERE id = ?1`
	stmtPurge  = `DELETE FROM messages`
)

// ErrStaleReceipt is wrapped by the error of an Ack or Nack whose receipt was
// replaced by a later delivery of the same message. Its code is
// QUEUE_OPERATION_FAILED.
var ErrStaleReceipt = errors.New("stale receipt: the message was redelivered under a newer receipt")

// Message is one delivery of a message.
type Message struct {
	ID            int64
	ReceiptHandle string // "{id}:{uuid}", opaque to callers
	Attempt       int    // 1 on the first delivery
	Payload       Payload
	EnqueuedAt    time.Time
}

// Queue is a handle on one queue store. It is safe for concurrent use.
type Queue struct {
	db         *sqlstore.DB
	now        func() time.Time
	visibility time.Duration
	notifier   Notifier
	hints      *hintState // wake-ups and NATS hints (hints.go)
}

// Open opens or creates the queue store in dir (created 0700; the file 0600).
func Open(ctx context.Context, dir string, opts ...Option) (*Queue, error) {
	o := buildOptions(opts)
	if err := o.validate(); err != nil {
		return nil, err
	}
	db, err := sqlstore.Open(ctx, dir, format, sqlstore.Options{Durability: o.durability, Logger: o.logger, ReadOnly: o.readOnly})
	if err != nil {
		return nil, err
	}
	return &Queue{db: db, now: o.clock, visibility: o.visibility, notifier: o.notifier, hints: newHintState(o, db.Path)}, nil
}

// OpenMemory opens the in-memory queue called name, shared by every handle
// of this process that names it and gone when the last one closes.
func OpenMemory(ctx context.Context, name string, opts ...Option) (*Queue, error) {
	o := buildOptions(opts)
	if err := o.validate(); err != nil {
		return nil, err
	}
	db, err := sqlstore.OpenMemory(ctx, name, format, sqlstore.Options{Logger: o.logger})
	if err != nil {
		return nil, err
	}
	return &Queue{db: db, now: o.clock, visibility: o.visibility, notifier: o.notifier, hints: newHintState(o, db.Path)}, nil
}

func (o options) validate() error {
	if _, err := bindings.ParseDurability(string(o.durability)); err != nil {
		return err
	}
	if err := o.wake.validate(); err != nil {
		return err
	}
	return validVisibility("default visibility", o.visibility)
}

func validVisibility(field string, d time.Duration) error {
	if d < MinVisibility || d > MaxVisibility {
		return bindings.Errorf(bindings.CodeInvalidInput,
			"%s: must be between %s and %s, got %s", field, MinVisibility, MaxVisibility, d)
	}
	return nil
}

// Path returns the database file (or "memory:<name>").
func (q *Queue) Path() string { return q.db.Path }

// DB returns the store plumbing, for localcloud's own tools.
func (q *Queue) DB() *sqlstore.DB { return q.db }

// Close releases the handle. Safe to call twice.
func (q *Queue) Close() error {
	q.hints.close()
	return q.db.Close()
}

func opErr(err error, format string, args ...any) error {
	return bindings.Wrap(bindings.CodeQueueOperationFailed, err, format, args...)
}

func (q *Queue) notify() {
	if q.notifier != nil {
		q.notifier.MessageDue()
	}
	q.hints.messageDue()
}

// Send enqueues one message, due at once. Payloads over MaxPayloadBytes
// (serialized) are rejected before the store is touched.
func (q *Queue) Send(ctx context.Context, p Payload) error {
	if err := p.validate("payload"); err != nil {
		return err
	}
	now := q.now().UnixMilli()
	err := q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		_, err := tx.Exec(ctx, stmtSend, string(p.Type), p.Data, now)
		return err
	})
	if err != nil {
		return opErr(err, "send")
	}
	q.notify()
	return nil
}

// Receive claims up to max (1..MaxReceiveBatch) due messages in (enqueued_at,
// id) order, hiding each for its lease. An empty queue gives an empty slice.
func (q *Queue) Receive(ctx context.Context, max int, opts ...ReceiveOption) ([]Message, error) {
	ro := receiveOptions{visibility: q.visibility}
	for _, fn := range opts {
		fn(&ro)
	}
	if max < 1 || max > MaxReceiveBatch {
		return nil, bindings.Errorf(bindings.CodeInvalidInput,
			"max: must be between 1 and %d, got %d", MaxReceiveBatch, max)
	}
	if err := validVisibility("visibility", ro.visibility); err != nil {
		return nil, err
	}
	// A read first keeps empty polls off the write lock.
	if due, err := q.anyDue(ctx); err != nil || !due {
		return nil, err
	}
	var msgs []Message
	err := q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		msgs = msgs[:0]
		now := q.now()
		rows, err := tx.Query(ctx, stmtDue, now.UnixMilli(), max)
		if err != nil {
			return err
		}
		for rows.Next() {
			var m Message
			var enq int64
			if err := rows.Scan(&m.ID, &enq); err != nil {
				rows.Close()
				return err
			}
			m.EnqueuedAt = time.UnixMilli(enq)
			msgs = append(msgs, m)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		leaseEnd := now.Add(ro.visibility).UnixMilli()
		for i := range msgs {
			m := &msgs[i]
			u := uuid.NewString()
			var typ, data string
			if err := tx.QueryRow(ctx, stmtClaim, leaseEnd, u, m.ID).Scan(&typ, &data, &m.Attempt); err != nil {
				return err
			}
			m.ReceiptHandle = strconv.FormatInt(m.ID, 10) + ":" + u
			m.Payload = Payload{Type: PayloadType(typ), Data: data}
		}
		return nil
	})
	if err != nil {
		return nil, opErr(err, "receive")
	}
	return msgs, nil
}

func (q *Queue) anyDue(ctx context.Context) (bool, error) {
	st, err := q.db.ReadStmt(ctx, stmtAny)
	if err != nil {
		return false, opErr(err, "receive")
	}
	var one int
	err = st.QueryRowContext(ctx, q.now().UnixMilli()).Scan(&one)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return false, opErr(err, "receive")
	}
	return true, nil
}

// Ack deletes the message the receipt was issued for. A receipt that is not
// of the form "{id}:{uuid}", or whose message is gone, is a no-op success. A
// stale receipt (the message was redelivered since) fails with
// ErrStaleReceipt and deletes nothing.
func (q *Queue) Ack(ctx context.Context, receipt string) error {
	id, u, ok := parseReceipt(receipt)
	if !ok {
		return nil
	}
	err := q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		res, err := tx.Exec(ctx, stmtAck, id, u)
		if err != nil {
			return err
		}
		return q.staleIfExists(ctx, tx, res, id)
	})
	return q.receiptErr(err, "ack", receipt)
}

// Nack makes the message due again at once (its attempt count is kept), so
// it is redelivered under a new receipt. Receipt rules are those of Ack.
func (q *Queue) Nack(ctx context.Context, receipt string) error {
	id, u, ok := parseReceipt(receipt)
	if !ok {
		return nil
	}
	changed := false
	err := q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		res, err := tx.Exec(ctx, stmtNack, id, u, q.now().UnixMilli())
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		changed = n == 1
		return q.staleIfExists(ctx, tx, res, id)
	})
	if err == nil && changed {
		q.notify()
	}
	return q.receiptErr(err, "nack", receipt)
}

func (q *Queue) staleIfExists(ctx context.Context, tx *sqlstore.Tx, res interface{ RowsAffected() (int64, error) }, id int64) error {
	n, err := res.RowsAffected()
	if err != nil || n == 1 {
		return err
	}
	var one int
	err = tx.QueryRow(ctx, stmtExists, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // already acked or purged: idempotent
	}
	if err != nil {
		return err
	}
	return ErrStaleReceipt
}

func (q *Queue) receiptErr(err error, op, receipt string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrStaleReceipt) {
		return &bindings.Error{Code: bindings.CodeQueueOperationFailed,
			Msg: fmt.Sprintf("%s receipt %q", op, receipt), Err: ErrStaleReceipt}
	}
	return opErr(err, "%s receipt %q", op, receipt)
}

// Purge deletes every message, due or in flight.
func (q *Queue) Purge(ctx context.Context) error {
	err := q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		_, err := tx.Exec(ctx, stmtPurge)
		return err
	})
	return opErr(err, "purge")
}

// parseReceipt splits "{id}:{uuid}". ok is false for anything this store
// could not have issued.
func parseReceipt(r string) (id int64, u string, ok bool) {
	idStr, u, found := strings.Cut(r, ":")
	if !found {
		return 0, "", false
	}
	id, err := strconv.ParseInt(idStr, 10, 64)
	if err != nil || id <= 0 {
		return 0, "", false
	}
	if _, err := uuid.Parse(u); err != nil || len(u) != 36 {
		return 0, "", false
	}
	return id, u, true
}
