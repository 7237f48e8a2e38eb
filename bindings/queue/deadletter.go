package queue

// Dead letters, and moving a message from one store to another.
//
// A move takes a message out of one store (the source) and puts it into
// another (the destination): a dead letter goes from a queue to its
// dead-letter queue, a redrive (redrive.go) goes back. Two stores are two
// database files and no transaction spans both, so a move is three commits,
// each of which can be run again without effect, and an intent row makes it
// resumable:
//
//  1. Source, in the claim transaction: the message is hidden (visible_at
//     moveHide ahead; receipt_handle a fresh UUID, so every receipt given
//     out for it is stale) and an intent is inserted into lc_moves: the
//     message id, the destination, the kind of move and the origin details.
//  2. Destination, one transaction: INSERT OR IGNORE of the arrival record,
//     keyed by (source location, source message id) - lc_dead_letters for a
//     dead letter, lc_redriven for a redrive - and only if that inserted a
//     row, the spec's send of the payload byte for byte (attempt 0, due at
//     once) and the new message id into the record.
//  3. Source, one transaction: the message is deleted (by id: AUTOINCREMENT
//     never reuses one) together with its intent.
//
// A process killed after step 1 leaves an intent and a hidden message; after
// step 2 also the copy in the destination and its record. Recovery runs
// steps 2 and 3 again for every intent; step 2 adds nothing when the record
// exists, so the message ends up in exactly one of the two stores. Recovery
// runs when a read-write handle opens the store (every intent: a process
// that opens the store after a crash finishes what the crash left), and from
// Receive for intents older than moveGrace (a mover that died while others
// keep running), looked for at most once per recoverEvery. An intent whose
// message is gone (purged meanwhile) is dropped: nothing was moved.
//
// Several processes may finish the same intent at once; the record's
// primary key makes the copy happen once. No write lock is ever held while
// another store's is taken, so two stores moving into each other cannot
// deadlock. The destination handle commits with synchronous=FULL, so even
// an OS crash cannot undo step 2 after step 3 reached the disk.
//
// The extra tables live in localcloud's own DDL (Format.Extra): a spec-exact
// reader never looks at them. To such a reader a message being moved is a
// message in flight under a lease of moveHide, which it does not deliver.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// MaxAttemptsLimit is the largest maxAttempts of WithDeadLetter (the stack
// file's bound too).
const MaxAttemptsLimit = 1000

// MemoryPrefix starts the location of an in-memory store: "memory:NAME".
const MemoryPrefix = "memory:"

// MovesDDL is localcloud's own DDL for moves between stores, part of the
// format's Extra: a spec-exact reader ignores these tables.
const MovesDDL = `CREATE TABLE IF NOT EXISTS lc_moves (
message_id INTEGER PRIMARY KEY, -- messages.id of the message being moved out
token TEXT NOT NULL, -- receipt_handle UUID set when the move began
dest TEXT NOT NULL, -- location of the destination store
kind TEXT NOT NULL, -- 'dead-letter' | 'redrive'
binding TEXT NOT NULL, -- binding name of this store, '' if unknown
attempts INTEGER NOT NULL, -- deliveries before the move
last_receipt TEXT, -- receipt handle of the last delivery, NULL if none
started_at INTEGER NOT NULL -- unix epoch MILLISECONDS
);
CREATE TABLE IF NOT EXISTS lc_dead_letters (
origin_store TEXT NOT NULL, -- location of the queue the message died in
origin_id INTEGER NOT NULL, -- its messages.id there
origin_binding TEXT NOT NULL, -- its binding name, '' if unknown
attempts INTEGER NOT NULL, -- deliveries there
last_receipt TEXT, -- receipt handle of the last delivery there
origin_enqueued_at INTEGER NOT NULL, -- unix epoch MILLISECONDS
moved_at INTEGER NOT NULL, -- unix epoch MILLISECONDS
dlq_message_id INTEGER, -- messages.id here
PRIMARY KEY (origin_store, origin_id)
);
CREATE INDEX IF NOT EXISTS lc_dead_letters_message ON lc_dead_letters (dlq_message_id);
CREATE TABLE IF NOT EXISTS lc_dead_letter_reasons (
dlq_message_id INTEGER PRIMARY KEY, -- messages.id here of a dead letter that was not spent but undeliverable
reason TEXT NOT NULL -- why its origin could not deliver it (rows.go)
);
CREATE TABLE IF NOT EXISTS lc_redriven (
dlq_store TEXT NOT NULL, -- location of the dead-letter queue
dlq_id INTEGER NOT NULL, -- the message's messages.id there
message_id INTEGER, -- messages.id here
redriven_at INTEGER NOT NULL, -- unix epoch MILLISECONDS
PRIMARY KEY (dlq_store, dlq_id)
);`

// Tuning of moves.
const (
	kindDeadLetter = "dead-letter"
	kindRedrive    = "redrive"
	// moveHide is how far ahead a message being moved is hidden. Recovery
	// finishes a move long before; the bound only matters to a spec-exact
	// reader, which would deliver the message once it passed.
	moveHide = MaxVisibility
	// moveGrace is how old an intent must be before Receive finishes it for
	// a mover that may have died; the mover itself takes milliseconds.
	moveGrace = 2 * time.Second
	// recoverEvery is how often, at most, Receive looks for such intents.
	recoverEvery = time.Second
	// moveTimeout bounds the steps 2 and 3 of a move, which run whether or
	// not the caller's context ends.
	moveTimeout = 30 * time.Second
	// moveBatch is how many intents recovery (and redrive) take at a time.
	moveBatch = 100
)

type deadLetterOptions struct {
	maxAttempts int
	dlq         string // location, normalised by Open
	set         bool
}

func (d deadLetterOptions) validate() error {
	if !d.set {
		return nil
	}
	if d.maxAttempts < 1 || d.maxAttempts > MaxAttemptsLimit {
		return bindings.Errorf(bindings.CodeInvalidInput, "maxAttempts: must be between 1 and %d, got %d", MaxAttemptsLimit, d.maxAttempts)
	}
	if d.dlq == "" {
		return bindings.Errorf(bindings.CodeInvalidInput, "dead-letter queue: must not be empty: without one, a message past maxAttempts would have nowhere to go")
	}
	return nil
}

// normLocation makes a store location comparable: "memory:NAME" as is, a
// directory absolute and clean.
func normLocation(loc string) (string, error) {
	if strings.HasPrefix(loc, MemoryPrefix) {
		return loc, nil
	}
	abs, err := filepath.Abs(loc)
	if err != nil {
		return "", bindings.Wrap(bindings.CodeLocalFilesystemError, err, "resolve store directory %q", loc)
	}
	return abs, nil
}

// openLocation opens the store at loc: a directory or "memory:NAME".
func openLocation(ctx context.Context, loc string, opts ...Option) (*Queue, error) {
	if name, ok := strings.CutPrefix(loc, MemoryPrefix); ok {
		return OpenMemory(ctx, name, opts...)
	}
	return Open(ctx, loc, opts...)
}

// internalHandle marks a handle a move opened on its destination: it runs
// no recovery of its own (which could open handles back on the source).
func internalHandle() Option { return func(o *options) { o.internal = true } }

// Location returns where the store is: its absolute directory, or
// "memory:NAME" for an in-memory store. It is what WithDeadLetter and
// RedriveTo take, and what dead letters record as their origin.
func (q *Queue) Location() string {
	if q.db.Dir != "" {
		return q.db.Dir
	}
	return q.db.Path
}

// Statements of moves.
const (
	stmtClaimInfo = `SELECT attempt, payload_type, payload_data, enqueued_at, receipt_handle FROM messages WHERE id = ?1`
	stmtHide      = `UPDATE messages SET visible_at = ?1, receipt_handle = ?2 WHERE id = ?3`
	// An intent that exists already (a spec-exact reader delivered the
	// hidden message after moveHide and it came due again) keeps its
	// destination: its step 2 may have run.
	stmtIntent = `INSERT INTO lc_moves (message_id, token, dest, kind, binding, attempts, last_receipt, started_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
ON CONFLICT (message_id) DO UPDATE SET token = excluded.token
RETURNING dest, kind, binding, attempts, last_receipt, started_at`
	stmtPendingMoves = `SELECT mv.message_id, mv.dest, mv.kind, mv.binding, mv.attempts, mv.last_receipt, mv.started_at,
m.id IS NOT NULL, m.payload_type, m.payload_data, m.enqueued_at
FROM lc_moves mv LEFT JOIN messages m ON m.id = mv.message_id
WHERE mv.started_at <= ?1 ORDER BY mv.message_id LIMIT ?2`
	stmtStaleMove    = `SELECT 1 FROM lc_moves WHERE started_at <= ?1 LIMIT 1`
	stmtDeleteMoved  = `DELETE FROM messages WHERE id = ?1`
	stmtDeleteIntent = `DELETE FROM lc_moves WHERE message_id = ?1`
	stmtDeadRecord   = `INSERT OR IGNORE INTO lc_dead_letters (origin_store, origin_id, origin_binding, attempts, last_receipt, origin_enqueued_at, moved_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)`
	stmtDeadRecordID    = `UPDATE lc_dead_letters SET dlq_message_id = ?3 WHERE origin_store = ?1 AND origin_id = ?2`
	stmtDeadReason      = `INSERT OR REPLACE INTO lc_dead_letter_reasons (dlq_message_id, reason) VALUES (?1, ?2)`
	stmtRedriveRecord   = `INSERT OR IGNORE INTO lc_redriven (dlq_store, dlq_id, redriven_at) VALUES (?1, ?2, ?3)`
	stmtRedriveRecordID = `UPDATE lc_redriven SET message_id = ?3 WHERE dlq_store = ?1 AND dlq_id = ?2`
)

// move is one message on its way from this store to dest.
type move struct {
	id          int64
	dest        string
	kind        string
	binding     string
	attempts    int
	lastReceipt sql.NullString
	startedAt   int64
	present     bool // the message row exists (read with the intent)
	typ, data   string
	enqueuedAt  int64
	reason      string // why the message could not be delivered (rows.go), "" if it was spent
}

// beginMove is step 1 for mv (id, dest, kind, binding, attempts,
// lastReceipt and the payload filled in), inside the caller's transaction.
func (q *Queue) beginMove(ctx context.Context, tx *sqlstore.Tx, now time.Time, mv *move) error {
	token := uuid.NewString()
	if _, err := tx.Exec(ctx, stmtHide, now.Add(moveHide).UnixMilli(), token, mv.id); err != nil {
		return err
	}
	mv.present = true
	return tx.QueryRow(ctx, stmtIntent, mv.id, token, mv.dest, mv.kind, mv.binding, mv.attempts, mv.lastReceipt, now.UnixMilli()).
		Scan(&mv.dest, &mv.kind, &mv.binding, &mv.attempts, &mv.lastReceipt, &mv.startedAt)
}

// deadLetterIfSpent starts the move of message id to the dead-letter queue
// if it was delivered maxAttempts times already. Inside the claim
// transaction.
func (q *Queue) deadLetterIfSpent(ctx context.Context, tx *sqlstore.Tx, now time.Time, id int64) (move, bool, error) {
	mv := move{id: id, dest: q.dead.dlq, kind: kindDeadLetter, binding: q.binding}
	r := storedRow{id: id, hasAttempt: true, hasReceipt: true}
	if err := tx.QueryRow(ctx, stmtClaimInfo, id).Scan(&r.attempt, &r.typ, &r.data, &r.enq, &r.receipt); err != nil {
		return move{}, false, err
	}
	d := decodeRow(r) // total: rows another program wrote (rows.go)
	mv.attempts, mv.typ, mv.data, mv.enqueuedAt, mv.reason = d.attempt, string(d.payload.Type), d.payload.Data, d.enqueuedAt, d.undeliverable
	receipt := d.receipt
	if d.payloadNull || (mv.reason == "" && mv.attempts < q.dead.maxAttempts) {
		return move{}, false, nil // a NULL payload the claim leaves in place
	}
	if receipt.Valid {
		mv.lastReceipt = sql.NullString{String: formatReceipt(id, receipt.String), Valid: true}
	}
	if err := q.beginMove(ctx, tx, now, &mv); err != nil {
		return move{}, false, err
	}
	return mv, true, nil
}

func formatReceipt(id int64, u string) string { return strconv.FormatInt(id, 10) + ":" + u }

// moveCtx is the context of steps 2 and 3: once step 1 committed, the move
// is finished even if the caller gives up (a cut retry, a shutdown).
func moveCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), moveTimeout)
}

// transfer runs steps 2 and 3 of moves, grouped by destination.
func (q *Queue) transfer(ctx context.Context, moves []move) error {
	var order []string
	groups := map[string][]move{}
	for _, mv := range moves {
		if _, ok := groups[mv.dest]; !ok {
			order = append(order, mv.dest)
		}
		groups[mv.dest] = append(groups[mv.dest], mv)
	}
	var errs []error
	for _, dest := range order {
		if err := q.transferTo(ctx, dest, groups[dest]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (q *Queue) transferTo(ctx context.Context, dest string, moves []move) error {
	present := 0
	for _, mv := range moves {
		if mv.present {
			present++
		}
	}
	if present > 0 {
		d, err := q.destination(ctx, dest)
		if err != nil {
			return err
		}
		from := q.Location()
		arrived := 0
		err = d.db.Write(ctx, func(tx *sqlstore.Tx) error {
			arrived = 0
			now := d.now().UnixMilli()
			for _, mv := range moves {
				if !mv.present {
					continue
				}
				ok, err := arrive(ctx, tx, from, mv, now)
				if err != nil {
					return err
				}
				if ok {
					arrived++
				}
			}
			return nil
		})
		if err != nil {
			return opErr(err, "move %d messages to %s", present, dest)
		}
		if arrived > 0 {
			d.notify()
		}
	}
	err := q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		for _, mv := range moves {
			if _, err := tx.Exec(ctx, stmtDeleteMoved, mv.id); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, stmtDeleteIntent, mv.id); err != nil {
				return err
			}
		}
		return nil
	})
	return opErr(err, "remove %d moved messages from %s", len(moves), q.Location())
}

// arrive is step 2 for one message: the arrival record, and the message
// only if the record is new. It reports whether the message was added.
func arrive(ctx context.Context, tx *sqlstore.Tx, from string, mv move, now int64) (bool, error) {
	var res sql.Result
	var err error
	var setID string
	switch mv.kind {
	case kindDeadLetter:
		res, err = tx.Exec(ctx, stmtDeadRecord, from, mv.id, mv.binding, mv.attempts, mv.lastReceipt, mv.enqueuedAt, now)
		setID = stmtDeadRecordID
	case kindRedrive:
		res, err = tx.Exec(ctx, stmtRedriveRecord, from, mv.id, now)
		setID = stmtRedriveRecordID
	default:
		return false, fmt.Errorf("move of message %d: unknown kind %q", mv.id, mv.kind)
	}
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err // arrived before: a recovery after a crash between steps 2 and 3
	}
	res, err = tx.Exec(ctx, stmtSend, mv.typ, mv.data, now)
	if err != nil {
		return false, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return false, err
	}
	if mv.kind == kindDeadLetter && mv.reason != "" {
		if _, err := tx.Exec(ctx, stmtDeadReason, id, mv.reason); err != nil {
			return false, err
		}
	}
	_, err = tx.Exec(ctx, setID, from, mv.id, id)
	return err == nil, err
}

// errQueueClosed is the error of a move on a closed handle.
var errQueueClosed = errors.New("queue handle closed")

// destination returns the handle of this handle's moves into loc, opening
// it on first use. It commits with synchronous=FULL (see the top of the
// file) and lives until q is closed.
func (q *Queue) destination(ctx context.Context, loc string) (*Queue, error) {
	if loc == q.Location() {
		return nil, bindings.Errorf(bindings.CodeQueueOperationFailed, "move to %s: that is this queue's own store", loc)
	}
	q.destMu.Lock()
	defer q.destMu.Unlock()
	if q.destClosed {
		return nil, opErr(errQueueClosed, "move to %s", loc)
	}
	if d := q.dests[loc]; d != nil {
		return d, nil
	}
	d, err := openLocation(ctx, loc, WithClock(q.now), WithLogger(q.hints.log),
		WithDurability(bindings.DurabilityFull), internalHandle())
	if err != nil {
		return nil, fmt.Errorf("open the destination of a move %q: %w", loc, err)
	}
	if q.dests == nil {
		q.dests = map[string]*Queue{}
	}
	q.dests[loc] = d
	return d, nil
}

// closeDestinations closes the handles of destination. Safe to call twice.
func (q *Queue) closeDestinations() error {
	q.destMu.Lock()
	defer q.destMu.Unlock()
	q.destClosed = true
	var errs []error
	for loc, d := range q.dests {
		errs = append(errs, d.Close())
		delete(q.dests, loc)
	}
	return errors.Join(errs...)
}

// pendingMoves reads up to moveBatch intents started at or before
// startedBefore (queue clock, unix ms), with their messages.
func (q *Queue) pendingMoves(ctx context.Context, startedBefore int64) ([]move, error) {
	st, err := q.db.ReadStmt(ctx, stmtPendingMoves)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, startedBefore, moveBatch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []move
	for rows.Next() {
		var mv move
		var r storedRow
		if err := rows.Scan(&mv.id, &mv.dest, &mv.kind, &mv.binding, &mv.attempts, &mv.lastReceipt, &mv.startedAt,
			&mv.present, &r.typ, &r.data, &r.enq); err != nil {
			return nil, err
		}
		if mv.present {
			d := decodeRow(r) // total: rows another program wrote (rows.go)
			mv.typ, mv.data, mv.enqueuedAt, mv.reason = string(d.payload.Type), d.payload.Data, d.enqueuedAt, d.undeliverable
		}
		out = append(out, mv)
	}
	return out, rows.Err()
}

// recoverMoves finishes every intent started at or before startedBefore.
func (q *Queue) recoverMoves(ctx context.Context, startedBefore int64) error {
	for range 1000 { // bounded: intents others keep adding are theirs to finish
		moves, err := q.pendingMoves(ctx, startedBefore)
		if err != nil {
			return opErr(err, "read unfinished moves")
		}
		if len(moves) == 0 {
			return nil
		}
		if err := q.transfer(ctx, moves); err != nil {
			return err
		}
		if len(moves) < moveBatch {
			return nil
		}
	}
	return nil
}

// recoverAtOpen finishes every unfinished move of the store.
func (q *Queue) recoverAtOpen(ctx context.Context) {
	if err := q.recoverMoves(ctx, math.MaxInt64); err != nil {
		q.hints.log.Warn("queue: cannot finish the moves a previous process left; retrying on receive",
			logKeyStore, q.Path(), logKeyErr, err)
	}
}

// maybeRecover finishes moves whose mover seems to have died, looking for
// them at most once per recoverEvery. Called by Receive.
func (q *Queue) maybeRecover(ctx context.Context) {
	if q.internal || q.readOnly {
		return
	}
	now := int64(time.Since(procStart))
	next := q.nextRecover.Load()
	if now < next || !q.nextRecover.CompareAndSwap(next, now+int64(recoverEvery)) {
		return
	}
	before := q.now().Add(-moveGrace).UnixMilli()
	st, err := q.db.ReadStmt(ctx, stmtStaleMove)
	if err != nil {
		return
	}
	var one int
	if err := st.QueryRowContext(ctx, before).Scan(&one); err != nil {
		return // none (or a failing store, which Receive reports)
	}
	mctx, cancel := moveCtx(ctx)
	defer cancel()
	if err := q.recoverMoves(mctx, before); err != nil {
		q.hints.log.Warn("queue: cannot finish an interrupted move; retrying", logKeyStore, q.Path(), logKeyErr, err)
	}
}

// maxMovesPerClaim caps the dead letters one claim transaction starts: a
// claim then touches at most twice as many rows as a plain claim of
// MaxReceiveBatch and holds the write lock briefly even on a slow machine;
// a claim that reached the cap wakes the waiters to claim again. A variable for the crash test,
// which wants even smaller moves.
var maxMovesPerClaim = MaxReceiveBatch

// procStart anchors maybeRecover's monotonic clock.
var procStart = time.Now()
