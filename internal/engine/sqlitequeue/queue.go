// Package sqlitequeue is the SQLite engine of the queue binding: the
// localqueue.v1 store format (one SQLite file, <dir>/localqueue.sqlite, or
// a shared in-memory database "memory:NAME") with leases, receipts
// "{id}:{uuid}" that go stale on redelivery, FIFO order by (enqueued_at,
// id), dead letters and redrives between stores, and wake-ups by in-process
// broadcast and NATS hints. Any number of handles and OS processes may
// share one queue; each message is delivered to exactly one receiver per
// lease.
//
// It implements bindings/queue/driver; apps reach it through package queue,
// which checks every argument first and runs Consume and ReceiveWait over
// it. The SQLite-only parts (the *sqlstore.DB for check, backup, restore
// and raw reads; Probe for the hint source; Tail) are for localcloud's own
// tools: internal/engine/sqlitetools opens the engine with OpenConfig and
// keeps this handle beside the public one (queue.New).
package sqlitequeue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// The payload types and limit, as the public package defines them.
const (
	TypeText        = driver.TypeText
	TypeJSON        = driver.TypeJSON
	MaxPayloadBytes = driver.MaxPayloadBytes
)

// maxLease is the longest lease and delay the public package lets through
// (queue.MaxVisibility, queue.MaxDelay).
const maxLease = 12 * time.Hour

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

var format = sqlstore.Format{
	Marker:  Marker,
	File:    FileName,
	Schema:  Schema,
	Extra:   Indexes + "\n" + MovesDDL + "\n" + DeliveryDDL + "\n" + AttributesDDL,
	Retired: retiredIndexes,
	OpCode:  bindings.CodeQueueOperationFailed,
	// A var's initializer may not refer to the var itself (checkRows does
	// not), so the function is set here directly.
	CheckRows: checkRows,
}

// Format returns the description of localqueue.v1 used by the store plumbing.
func Format() sqlstore.Format { return format }

// The spec's statements.
const (
	stmtSend = `INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES (?1, ?2, ?3, ?3, 0)`
	// The spec's send with a later visible_at (WithDelay).
	stmtSendAt = `INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES (?1, ?2, ?3, ?4, 0)`
	stmtAny    = `SELECT 1 FROM messages WHERE visible_at <= ?1 LIMIT 1`
	stmtOddDue = `SELECT 1 FROM messages WHERE visible_at <= ?1
AND (enqueued_at < '' AND payload_type IS NOT NULL AND payload_data IS NOT NULL AND attempt IS NOT NULL) IS NOT 1 LIMIT 1`
	// The spec's claim; the NULL tests (true on the spec's schema) keep it
	// from claiming a row it could not return.
	stmtClaim = `UPDATE messages
SET visible_at = ?1, attempt = attempt + 1,
receipt_handle = ?2 WHERE id = ?3 AND payload_type IS NOT NULL AND payload_data IS NOT NULL AND attempt IS NOT NULL
RETURNING payload_type, payload_data, attempt, ` + claimAttrs
	stmtAck    = `DELETE FROM messages WHERE id = ?1 AND receipt_handle = ?2`
	stmtNack   = `UPDATE messages SET visible_at = ?3 WHERE id = ?1 AND receipt_handle = ?2`
	stmtExists = `SELECT 1 FROM messages WHERE id = ?1`
	stmtPurge  = `DELETE FROM messages`
)

// ErrStaleReceipt is driver.ErrStaleReceipt, wrapped by the error of an
// Ack, Nack or Extend whose receipt was replaced by a later delivery.
var ErrStaleReceipt = driver.ErrStaleReceipt

// The driver's types under the names this engine's code was written with.
type (
	Message       = driver.Message
	Payload       = driver.Payload
	PayloadType   = string
	PeekedMessage = driver.PeekedMessage
	Origin        = driver.Origin
	OriginCount   = driver.OriginCount
	Stats         = driver.Stats
	RedriveResult = driver.RedriveResult
)

// Queue is a handle on one queue store. It is safe for concurrent use.
type Queue struct {
	db       *sqlstore.DB
	now      func() time.Time
	notifier interface{ MessageDue() }
	hints    *hintState // wake-ups and NATS hints (hints.go)
	binding  string
	dead     deadLetterOptions // maxAttempts 0: no dead-letter policy
	readOnly bool
	internal bool // opened by a move on its destination (deadletter.go)

	destMu      sync.Mutex
	dests       map[string]*Queue // destinations of moves, by location
	destClosed  bool
	nextRecover atomic.Int64 // when maybeRecover looks next (since procStart)
	stuckLogged atomic.Int64 // moves left in place at the last report (reportStuck)
	targets     []string     // WithMoveTargets, normalised
	lastFull    atomic.Bool  // the last claim returned as many as it asked for
	hasAttrs    atomic.Bool  // the store holds message attributes (attrs.go): acks delete them
	dedupWindow time.Duration
	oddLogged   sync.Map // ids of undeliverable rows logged (rows.go)
}

// Open opens or creates the queue store in dir (created 0700; the file 0600).
// A read-write open finishes the moves between stores (dead letters,
// redrives) that a killed process left unfinished; see deadletter.go.
func Open(ctx context.Context, dir string, o options) (*Queue, error) {
	o, err := prepareOptions(o)
	if err != nil {
		return nil, err
	}
	db, err := sqlstore.Open(ctx, dir, format, sqlstore.Options{Durability: o.durability, Logger: o.logger, ReadOnly: o.readOnly})
	if err != nil {
		return nil, err
	}
	return newQueue(ctx, db, o)
}

// OpenMemory opens the in-memory queue called name, shared by every handle
// of this process that names it and gone when the last one closes. Its
// Location is "memory:NAME".
func OpenMemory(ctx context.Context, name string, o options) (*Queue, error) {
	o, err := prepareOptions(o)
	if err != nil {
		return nil, err
	}
	db, err := sqlstore.OpenMemory(ctx, name, format, sqlstore.Options{Logger: o.logger})
	if err != nil {
		return nil, err
	}
	return newQueue(ctx, db, o)
}

func prepareOptions(o options) (options, error) {
	if o.clock == nil {
		o.clock = time.Now
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	if o.dead.set {
		loc, err := normLocation(o.dead.dlq)
		if err != nil {
			return o, err
		}
		o.dead.dlq = loc
	}
	for i, t := range o.targets {
		loc, err := normLocation(t)
		if err != nil {
			return o, err
		}
		o.targets[i] = loc
	}
	return o, nil
}

func newQueue(ctx context.Context, db *sqlstore.DB, o options) (*Queue, error) {
	q := &Queue{db: db, now: o.clock, notifier: o.notifier, hints: newHintState(o, db.Path),
		binding: o.binding, readOnly: o.readOnly, internal: o.internal, targets: o.targets, dedupWindow: o.dedupWindow}
	if q.dedupWindow <= 0 {
		q.dedupWindow = defaultDedupWindow
	}
	if o.dead.set {
		if same, how := sameStore(o.dead.dlq, q.Location()); same {
			_ = q.Close()
			return nil, bindings.Errorf(bindings.CodeInvalidInput,
				"dead-letter queue: must be another store than the queue itself, got %s, which %s %s", o.dead.dlq, how, q.Location())
		}
		if strings.HasPrefix(o.dead.dlq, MemoryPrefix) && q.db.Dir != "" {
			_ = q.Close()
			return nil, bindings.Errorf(bindings.CodeInvalidInput,
				"dead-letter queue: a queue stored in a file needs one stored in a file too, got %s: the moves it records outlive this process, an in-memory queue does not", o.dead.dlq)
		}
		q.dead = o.dead
	}
	if !q.readOnly {
		// Before any move: the legacy records confirm moves begun under
		// an older localcloud (arrive).
		if err := q.migrateArrivals(ctx); err != nil {
			_ = q.Close()
			return nil, opErr(err, "open queue store %q: move the arrival records of an older localcloud into lc_arrivals", q.Path())
		}
		if err := q.noteAttrs(ctx); err != nil {
			_ = q.Close()
			return nil, opErr(err, "open queue store %q", q.Path())
		}
	}
	if !q.readOnly && !q.internal {
		q.recoverAtOpen(ctx)
	}
	return q, nil
}

func (o options) validate() error {
	if _, err := bindings.ParseDurability(string(o.durability)); err != nil {
		return err
	}
	if err := o.wake.validate(); err != nil {
		return err
	}
	return o.dead.validate()
}

// Path returns the database file (or "memory:<name>").
func (q *Queue) Path() string { return q.db.Path }

// DB returns the store plumbing, for localcloud's own tools.
func (q *Queue) DB() *sqlstore.DB { return q.db }

// Close releases the handle. Safe to call twice.
func (q *Queue) Close() error {
	q.hints.close()
	derr := q.closeDestinations()
	return errors.Join(q.db.Close(), derr)
}

func opErr(err error, format string, args ...any) error {
	return bindings.Wrap(bindings.CodeQueueOperationFailed, err, format, args...)
}

func (q *Queue) notify() { q.notifySent(0) }

// notifySent is notify after sends whose largest new message id is lastID
// (0: unknown, or no insert); the hint carries it so that `up` can tell the
// insert is covered.
func (q *Queue) notifySent(lastID int64) {
	if q.notifier != nil {
		q.notifier.MessageDue()
	}
	q.hints.messageDue(lastID)
}

// Send enqueues ps (checked by the caller), due after delay: one message
// with the spec's insert alone, several in one transaction (sendBatch). It
// returns the new messages' ids.
func (q *Queue) Send(ctx context.Context, ps []Payload, delay time.Duration) ([]int64, error) {
	if len(ps) != 1 || len(ps[0].Attrs) > 0 {
		return q.sendBatch(ctx, ps, delay) // one transaction: the message and its attributes
	}
	p := ps[0]
	now := q.now().UnixMilli()
	// The spec's insert is one statement: it runs as its own transaction.
	stmt, args := insertStmt(p, now, delay)
	res, err := q.db.Exec(ctx, stmt, args...)
	if err != nil {
		return nil, opErr(err, "send")
	}
	id, err := res.LastInsertId()
	if err != nil {
		// The message is stored; only its id is not known.
		q.notifySent(0)
		return nil, opErr(err, "send: the message is stored but its id is unknown")
	}
	q.notifySent(id)
	return []int64{id}, nil
}

// insert is the spec's send of p at now (unix ms), due after delay, and
// the message's attributes if it has any.
func (q *Queue) insert(ctx context.Context, tx *sqlstore.Tx, p Payload, now int64, delay time.Duration) (id int64, err error) {
	stmt, args := insertStmt(p, now, delay)
	res, err := tx.Exec(ctx, stmt, args...)
	if err != nil {
		return 0, err
	}
	if id, err = res.LastInsertId(); err != nil {
		return 0, err
	}
	return id, q.setAttrs(ctx, tx, id, p.Attrs)
}

// insertStmt is the spec's send, with visible_at = enqueued_at + delay.
func insertStmt(p Payload, now int64, delay time.Duration) (string, []any) {
	if delay == 0 {
		return stmtSend, []any{string(p.Type), p.Data, now}
	}
	return stmtSendAt, []any{string(p.Type), p.Data, now, now + delayMillis(delay)}
}

// Receive claims up to max (checked by the caller) due messages in (enqueued_at,
// id) order, hiding each for its lease. An empty queue gives an empty slice.
//
// With a dead-letter policy (WithDeadLetter), a due message that was
// delivered maxAttempts times already is not delivered: the claim starts its
// move to the dead-letter queue, and Receive finishes the move before it
// returns (a move that fails is logged and finished later; the messages
// claimed are returned all the same).
func (q *Queue) Receive(ctx context.Context, max int, lease time.Duration) ([]Message, error) {
	_, msgs, err := q.receive(ctx, nil, max, lease)
	return msgs, err
}

// receive is Receive that first acks receipts in the same transaction
// (AckReceive), returning their outcomes.
func (q *Queue) receive(ctx context.Context, receipts []string, max int, lease time.Duration) ([]driver.AckOutcome, []Message, error) {
	q.maybeRecover(ctx)
	if len(receipts) == 0 {
		// A read first keeps empty polls off the write lock. After a
		// claim that came back full more is likely due, so the read is
		// skipped then.
		if !q.lastFull.Load() {
			if due, err := q.anyDue(ctx); err != nil || !due {
				return nil, nil, err
			}
		}
		if max == 1 && !q.dead.set {
			msgs, err := q.receiveOne(ctx, lease)
			return nil, msgs, err
		}
	}
	out := make([]driver.AckOutcome, len(receipts))
	var msgs []Message
	var moves []move
	claim := func(tx *sqlstore.Tx) error {
		if err := q.ackIn(ctx, tx, receipts, out); err != nil {
			return err
		}
		var err error
		msgs, moves, err = q.claim(ctx, tx, q.now(), max, lease)
		return err
	}
	var err error
	if q.dead.set {
		// A claim that begins moves stays a transaction of its own.
		err = q.db.Write(ctx, claim)
	} else {
		// The claim only sets out and msgs, so it may join a group commit.
		err = q.db.WriteGroup(ctx, claim)
	}
	if err != nil && len(receipts) > 0 {
		return nil, nil, opErr(err, "ack %d messages and receive", len(receipts))
	}
	if err != nil {
		return nil, nil, opErr(err, "receive")
	}
	q.lastFull.Store(len(msgs) == max)
	if len(moves) > 0 {
		mctx, cancel := moveCtx(ctx)
		defer cancel()
		if _, err := q.transfer(mctx, moves, scope{}); err != nil {
			q.hints.log.Warn("queue: cannot move dead letters now; retrying later", logKeyStore, q.Path(), logKeyErr, err)
		}
		if len(moves) >= maxMovesPerClaim && len(msgs) < max {
			// The claim stopped at its cap of moves, so more may be due:
			// a waiter that took its wake channels before this claim (a
			// Consume, a ReceiveWait) looks again instead of sleeping.
			q.hints.wakeLocal()
		}
	}
	return out, msgs, nil
}

// claim is the claim transaction's body: the spec's select of due ids and
// the claim of them, all in one statement (claimBatch). With a dead-letter
// policy each due message is first looked at and claimed alone (the spec's
// claim): one that is spent starts its move instead, and the select runs
// again for the places it left, so a claim still returns up to max
// messages.
func (q *Queue) claim(ctx context.Context, tx *sqlstore.Tx, now time.Time, max int, lease time.Duration) ([]Message, []move, error) {
	msgs := make([]Message, 0, max)
	var moves []move
	// skipped are the due rows left in place (undeliverable, no dead-letter
	// queue): they stay due, so each select asks for that many more.
	skipped := map[int64]bool{}
	leaseEnd := now.Add(lease).UnixMilli()
	// The claim's scan targets, once per claim rather than per message,
	// in one struct (Scan takes their addresses, so it is one heap
	// allocation, not one per target).
	var sc struct {
		typ, data, attempt any
		attrs              sql.NullString
	}
	// Without a dead-letter policy the due messages are claimed by one
	// statement (claimBatch); with one, each is looked at, then claimed
	// alone.
	var batch []dueMessage
	for {
		want := max - len(msgs)
		due, err := dueMessages(ctx, tx, now, want+len(skipped))
		if err != nil {
			return nil, nil, err
		}
		seen := 0
		batch = batch[:0]
		for _, m := range due {
			if skipped[m.ID] {
				continue
			}
			seen++
			if len(msgs)+len(batch) == max {
				break
			}
			if !q.dead.set && m.odd == "" {
				batch = append(batch, m)
				continue
			}
			if q.dead.set {
				mv, spent, err := q.deadLetterIfSpent(ctx, tx, now, m.ID)
				if err != nil {
					return nil, nil, err
				}
				if spent {
					moves = append(moves, mv)
					continue
				}
			} else if m.odd != "" {
				q.skipUndeliverable(m.ID, m.odd)
				skipped[m.ID] = true
				continue
			}
			receipt, u := newReceipt(m.ID)
			sc.typ, sc.data, sc.attempt, sc.attrs = nil, nil, nil, sql.NullString{}
			err := tx.QueryRow(ctx, stmtClaim, leaseEnd, u, m.ID).Scan(&sc.typ, &sc.data, &sc.attempt, &sc.attrs)
			if errors.Is(err, sql.ErrNoRows) { // a NULL payload or attempt: left in place
				q.skipUndeliverable(m.ID, "payload_type, payload_data or attempt is NULL")
				skipped[m.ID] = true
				continue
			}
			if err != nil {
				return nil, nil, err
			}
			d := decodeRow(storedRow{id: m.ID, typ: sc.typ, data: sc.data, enq: int64(0), attempt: sc.attempt, hasAttempt: true})
			m.ReceiptHandle = receipt
			m.Payload, m.Attempt = d.payload, d.attempt
			m.Payload.Attrs = q.attrsOf(sc.attrs)
			msgs = append(msgs, m.Message)
		}
		if len(batch) > 0 {
			if msgs, err = q.claimBatch(ctx, tx, leaseEnd, batch, msgs, skipped); err != nil {
				return nil, nil, err
			}
		}
		if seen < want || len(msgs) == max || len(moves) >= maxMovesPerClaim {
			return msgs, moves, nil
		}
	}
}

// skipUndeliverable logs, once per handle, a due row a receive leaves in
// place because it cannot be delivered and there is no dead-letter queue.
func (q *Queue) skipUndeliverable(id int64, why string) {
	if _, done := q.oddLogged.LoadOrStore(id, true); done {
		return
	}
	q.hints.log.Warn("queue: a message another program wrote cannot be delivered; left in place (localcloud check lists such rows)",
		logKeyStore, q.Path(), "id", id, "reason", why)
}

// receiveOne claims the first due message with one statement, saving the
// separate BEGIN, select and COMMIT of a batch claim. With a dead-letter
// policy Receive takes the batch path, which looks at attempts first.
func (q *Queue) receiveOne(ctx context.Context, lease time.Duration) ([]Message, error) {
	now := q.now()
	u := uuid.NewString()
	var m Message
	var r storedRow
	r.hasAttempt = true
	err := q.db.WriteRow(ctx, stmtClaimOne, []any{now.Add(lease).UnixMilli(), u, now.UnixMilli()},
		&m.ID, &r.enq, &r.typ, &r.data, &r.attempt, &r.attrs)
	if errors.Is(err, sql.ErrNoRows) {
		q.lastFull.Store(false)
		return q.receiveOdd(ctx, now, lease)
	}
	if err != nil {
		return nil, opErr(err, "receive")
	}
	q.lastFull.Store(true)
	d := decodeRow(r)
	m.EnqueuedAt = time.UnixMilli(d.enqueuedAt)
	m.ReceiptHandle = formatReceipt(m.ID, u)
	m.Payload, m.Attempt = d.payload, d.attempt
	m.Payload.Attrs = q.attrsOf(r.attrs)
	return []Message{m}, nil
}

// receiveOdd is Receive(1) when the one-statement claim found nothing: if
// a due row it does not claim (rows.go) is there, the batch claim skips it
// and delivers what is behind it.
func (q *Queue) receiveOdd(ctx context.Context, now time.Time, lease time.Duration) ([]Message, error) {
	st, err := q.db.ReadStmt(ctx, stmtOddDue)
	if err != nil {
		return nil, opErr(err, "receive")
	}
	var one int
	err = st.QueryRowContext(ctx, now.UnixMilli()).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, opErr(err, "receive")
	}
	var msgs []Message
	err = q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		var err error
		msgs, _, err = q.claim(ctx, tx, q.now(), 1, lease)
		return err
	})
	if err != nil {
		return nil, opErr(err, "receive")
	}
	return msgs, nil
}

// dueMessage is one row of the spec's select of due ids.
type dueMessage struct {
	Message
	odd string // why it cannot be delivered (enqueued_at not a number), or ""
}

// dueMessages runs the spec's select of up to n due ids.
func dueMessages(ctx context.Context, tx *sqlstore.Tx, now time.Time, n int) ([]dueMessage, error) {
	rows, err := tx.Query(ctx, stmtDue, now.UnixMilli(), n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	msgs := make([]dueMessage, 0, n)
	var id int64
	var enq any // scan targets once, not per row: Scan takes their addresses
	for rows.Next() {
		var m dueMessage
		enq = nil
		if err := rows.Scan(&id, &enq); err != nil {
			return nil, err
		}
		m.ID = id
		ms, note, ok := intOf("enqueued_at", enq)
		if !ok {
			m.odd = note
		}
		m.EnqueuedAt = time.UnixMilli(ms)
		msgs = append(msgs, m)
	}
	return msgs, rows.Err()
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
	if q.hasAttrs.Load() {
		return q.ackAttrs(ctx, id, u, receipt)
	}
	// The common case, a current receipt, is the spec's delete on its own;
	// only when it deletes nothing does the transaction below tell a
	// stale receipt from a message already gone.
	res, err := q.db.Exec(ctx, stmtAck, id, u)
	if err != nil {
		return q.receiptErr(err, "ack", receipt)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return nil
	}
	err = q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		res, err := tx.Exec(ctx, stmtAck, id, u)
		if err != nil {
			return err
		}
		return q.staleIfExists(ctx, tx, res, id)
	})
	return q.receiptErr(err, "ack", receipt)
}

// Nack makes the message due again after delay (0: at once), keeping its
// attempt count, so it is redelivered under a new receipt. Receipt rules
// are those of Ack.
func (q *Queue) Nack(ctx context.Context, receipt string, delay time.Duration) error {
	id, u, ok := parseReceipt(receipt)
	if !ok {
		return nil
	}
	// Like Ack: the common case, a current receipt, is the spec's update on
	// its own (a one-statement write, so it joins a group commit); only
	// when it changes nothing does the transaction below tell a stale
	// receipt from a message already gone.
	visibleAt := q.now().UnixMilli() + delayMillis(delay)
	res, err := q.db.Exec(ctx, stmtNack, id, u, visibleAt)
	if err != nil {
		return q.receiptErr(err, "nack", receipt)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		q.notify()
		return nil
	}
	changed := false
	err = q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		res, err := tx.Exec(ctx, stmtNack, id, u, visibleAt)
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
		if _, err := tx.Exec(ctx, stmtPurge); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, stmtClearAttrs); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, stmtClearErrors)
		return err
	})
	return opErr(err, "purge")
}

// parseReceipt splits "{id}:{uuid}"; ok is false for anything this store
// could not have issued (see ParseReceipt, the one rule).
func parseReceipt(r string) (id int64, u string, ok bool) {
	if id, u, ok := canonicalReceipt(r); ok {
		return id, u, true
	}
	rc, err := ParseReceipt(r)
	return rc.ID, rc.UUID, err == nil
}
