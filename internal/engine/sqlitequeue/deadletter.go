package sqlitequeue

// Dead letters, and moving a message from one store to another.
//
// A move takes a message out of one store (the source) and puts it into
// another (the destination): a dead letter goes from a queue to its
// dead-letter queue, a redrive (redrive.go) goes back. Two stores are two
// database files and no transaction spans both, so a move is three commits,
// each of which can be run again without effect, and an intent row makes it
// resumable:
//
//  1. Source, in the claim transaction: an intent is inserted into lc_moves
//     (the message id, a token - a fresh UUID unique to this one move -, the
//     destination, the kind of move and the origin details) and the message
//     is hidden (visible_at moveHide ahead; receipt_handle a fresh UUID, so
//     every receipt given out for it is stale).
//  2. Destination, one transaction: the arrival record of this move in
//     lc_arrivals, keyed by the intent's token (UNIQUE), and only if that
//     inserted a row, the spec's send of the payload byte for byte (attempt
//     0, due at once) and the new message id into the record.
//  3. Source, one transaction, only once step 2 committed (the destination
//     holds the record of this move): the message is deleted (by id:
//     AUTOINCREMENT never reuses one within the file) with its intent.
//
// The record is keyed by the token, not by (source location, source id):
// a store restored from an older backup, or deleted and created again,
// starts its ids over, and a key of reusable ids would make a later move
// look as if it had arrived already. Stores of older versions keep such
// records in lc_dead_letters and lc_redriven; a read-write open moves them
// into lc_arrivals (migrateArrivals), and a move begun before the upgrade
// finds its own there by origin and time (stmtLegacyArrival).
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
// The destination of an intent is read from the store file, which may have
// come from anywhere (a restore, another program), so a handle finishes a
// move only toward a destination it names itself (mayFinish): a dead letter
// only toward the dead-letter queue of its current policy, a redrive only
// toward the running Redrive's target, the message's recorded origin if that
// is an existing queue store (or one of WithMoveTargets), or a
// WithMoveTargets location; a store in a file never moves into memory. Any
// other move stays as it is - the message hidden in the source with its
// intent, never dropped, no store created - and is logged; References lists
// such locations for the stack tools (check, status, up, restore).
//
// Several processes may finish the same intent at once; the record's
// unique token makes the copy happen once. No write lock is ever held while
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
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// MemoryPrefix starts the location of an in-memory store: "memory:NAME".
const MemoryPrefix = "memory:"

// MovesDDL is localcloud's own DDL for moves between stores, part of the
// format's Extra: a spec-exact reader ignores these tables. lc_arrivals
// holds the arrival records, keyed by the move's token. lc_dead_letters and
// lc_redriven are the arrival records of older localcloud versions, keyed
// by (origin location, origin id), which repeats once a store is restored
// from an older backup or created again; they are kept (empty) so such
// stores verify, and a read-write open moves their rows into lc_arrivals
// (migrateArrivals).
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
CREATE TABLE IF NOT EXISTS lc_arrivals (
move_token TEXT NOT NULL UNIQUE, -- lc_moves.token of the move in the source: unique to that one move
kind TEXT NOT NULL, -- 'dead-letter' | 'redrive'
origin_store TEXT NOT NULL, -- location of the store the message came from
origin_id INTEGER NOT NULL, -- its messages.id there (not a key: ids repeat after a restore)
origin_binding TEXT NOT NULL, -- its binding name, '' if unknown
attempts INTEGER NOT NULL, -- deliveries there
last_receipt TEXT, -- receipt handle of the last delivery there
origin_enqueued_at INTEGER NOT NULL, -- unix epoch MILLISECONDS
arrived_at INTEGER NOT NULL, -- unix epoch MILLISECONDS
message_id INTEGER -- messages.id here
);
CREATE INDEX IF NOT EXISTS lc_arrivals_message ON lc_arrivals (message_id);
CREATE INDEX IF NOT EXISTS lc_arrivals_legacy ON lc_arrivals (origin_store, origin_id) WHERE move_token LIKE 'legacy:%';
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
	moveHide = maxLease
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

// validate checks what only this engine can: the public package checked
// maxAttempts.
func (d deadLetterOptions) validate() error {
	if !d.set {
		return nil
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

// sameStore reports whether the locations a and b (normalised) are one
// store, and how: the same path, the same directory once symlinks are
// resolved, or the same directory or database file by identity
// (os.SameFile: a bind mount, a hard link).
func sameStore(a, b string) (bool, string) {
	if a == b {
		return true, "is"
	}
	if strings.HasPrefix(a, MemoryPrefix) || strings.HasPrefix(b, MemoryPrefix) {
		return false, ""
	}
	ra, errA := filepath.EvalSymlinks(a)
	rb, errB := filepath.EvalSymlinks(b)
	if errA == nil && errB == nil && ra == rb {
		return true, "resolves (through symlinks) to"
	}
	for _, name := range []string{"", FileName} {
		fa, errA := os.Stat(filepath.Join(a, name))
		fb, errB := os.Stat(filepath.Join(b, name))
		if errA == nil && errB == nil && os.SameFile(fa, fb) {
			if name == "" {
				return true, "is the same directory as"
			}
			return true, "holds the same database file as"
		}
	}
	return false, ""
}

// openLocation opens the store at loc: a directory or "memory:NAME".
func openLocation(ctx context.Context, loc string, o options) (*Queue, error) {
	if name, ok := strings.CutPrefix(loc, MemoryPrefix); ok {
		return OpenMemory(ctx, name, o)
	}
	return Open(ctx, loc, o)
}

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
	// It keeps its token too: the token names the move in the destination's
	// arrival record.
	stmtIntent = `INSERT INTO lc_moves (message_id, token, dest, kind, binding, attempts, last_receipt, started_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
ON CONFLICT (message_id) DO UPDATE SET token = lc_moves.token
RETURNING token, dest, kind, binding, attempts, last_receipt, started_at`
	stmtPendingMoves = `SELECT mv.message_id, mv.token, mv.dest, mv.kind, mv.binding, mv.attempts, mv.last_receipt, mv.started_at,
m.id IS NOT NULL, m.payload_type, m.payload_data, m.enqueued_at, a.origin_store
FROM lc_moves mv LEFT JOIN messages m ON m.id = mv.message_id
LEFT JOIN lc_arrivals a ON a.message_id = mv.message_id AND a.kind = 'dead-letter'
WHERE mv.started_at <= ?1 AND mv.message_id > ?2 ORDER BY mv.message_id LIMIT ?3`
	stmtStaleMove    = `SELECT 1 FROM lc_moves WHERE started_at <= ?1 LIMIT 1`
	stmtDeleteMoved  = `DELETE FROM messages WHERE id = ?1`
	stmtDeleteIntent = `DELETE FROM lc_moves WHERE message_id = ?1`
	// The arrival record of one move, by its token: added once, whatever
	// the message id.
	stmtArrival = `INSERT INTO lc_arrivals (move_token, kind, origin_store, origin_id, origin_binding, attempts, last_receipt, origin_enqueued_at, arrived_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (move_token) DO NOTHING`
	stmtArrivalID = `UPDATE lc_arrivals SET message_id = ?2 WHERE move_token = ?1`
	// A record an older localcloud wrote (migrated from lc_dead_letters or
	// lc_redriven, so it has no token) for the same origin message that
	// arrived after this move began: the arrival of this very move, begun
	// before the upgrade. An earlier move of the same id arrived before
	// this one began.
	stmtLegacyArrival = `UPDATE lc_arrivals SET move_token = ?1
WHERE rowid = (SELECT rowid FROM lc_arrivals WHERE move_token LIKE 'legacy:%' AND origin_store = ?2 AND origin_id = ?3
AND kind = ?4 AND arrived_at >= ?5 ORDER BY arrived_at LIMIT 1)`
	// Why a message could not be delivered in its queue (rows.go), by its
	// id here; a dead letter without one clears what an earlier message
	// with the same id (before a restore) left.
	stmtDeadReason      = `INSERT OR REPLACE INTO lc_dead_letter_reasons (dlq_message_id, reason) VALUES (?1, ?2)`
	stmtDeadReasonClear = `DELETE FROM lc_dead_letter_reasons WHERE dlq_message_id = ?1`
)

// Migration of the arrival records of older localcloud versions, one
// transaction at a read-write open. Their rows get a token of their own
// ("legacy:" and random hex) that no move has.
const (
	stmtHasLegacyArrivals = `SELECT (SELECT COUNT(*) FROM lc_dead_letters) + (SELECT COUNT(*) FROM lc_redriven)`
	stmtMigrateDead       = `INSERT INTO lc_arrivals (move_token, kind, origin_store, origin_id, origin_binding, attempts, last_receipt, origin_enqueued_at, arrived_at, message_id)
SELECT 'legacy:' || lower(hex(randomblob(16))), 'dead-letter', origin_store, origin_id, origin_binding, attempts, last_receipt, origin_enqueued_at, moved_at, dlq_message_id
FROM lc_dead_letters`
	stmtMigrateRedriven = `INSERT INTO lc_arrivals (move_token, kind, origin_store, origin_id, origin_binding, attempts, last_receipt, origin_enqueued_at, arrived_at, message_id)
SELECT 'legacy:' || lower(hex(randomblob(16))), 'redrive', dlq_store, dlq_id, '', 0, NULL, 0, redriven_at, message_id
FROM lc_redriven`
	stmtClearDead     = `DELETE FROM lc_dead_letters`
	stmtClearRedriven = `DELETE FROM lc_redriven`
)

// migrateArrivals moves the arrival records of older localcloud versions
// into lc_arrivals, in one transaction.
func (q *Queue) migrateArrivals(ctx context.Context) error {
	var n int64
	if err := q.db.R.QueryRowContext(ctx, stmtHasLegacyArrivals).Scan(&n); err != nil || n == 0 {
		return err
	}
	return q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		for _, st := range []string{stmtMigrateDead, stmtMigrateRedriven, stmtClearDead, stmtClearRedriven} {
			if _, err := tx.Exec(ctx, st); err != nil {
				return err
			}
		}
		return nil
	})
}

// move is one message on its way from this store to dest.
type move struct {
	id          int64
	token       string // unique to this one move: names it in the arrival record
	dest        string
	kind        string
	binding     string
	attempts    int
	lastReceipt sql.NullString
	startedAt   int64
	present     bool // the message row exists (read with the intent)
	typ, data   string
	enqueuedAt  int64
	// origin is where the message came from as recorded in this store's
	// arrival records, "" if nowhere: the target of a redrive to origins.
	origin string
	stuck  string // why mayFinish refused it
	// lastError is the message's last error here (lc_errors), carried into
	// the dead-letter queue.
	lastError string
	reason    string // why the message could not be delivered (rows.go), "" if it was spent
	attrs     []byte // the message's attributes here (lc_attributes), carried along
}

// scope is what a caller may finish moves toward besides the handle's own
// rules (mayFinish): the target of a running Redrive.
type scope struct {
	redriveTo string // RedriveTo's location
	origins   bool   // a Redrive without RedriveTo: toward each message's recorded origin
}

// mayFinish returns "" if this handle may finish mv (steps 2 and 3), else
// why not. The destination of an intent is read from the store file, which
// a restore may have brought from anywhere, so it is trusted only when the
// handle names it itself: a dead letter goes only to the dead-letter queue
// of the handle's current policy, a redrive only to the running Redrive's
// target (or the message's recorded origin, see originOK) or a location of
// WithMoveTargets. A store in a file never moves into memory: whatever
// memory store a recorded location named is gone with its process.
func (q *Queue) mayFinish(mv move, sc scope) string {
	if !mv.present {
		return "" // nothing to move: only the intent goes, nothing is written elsewhere
	}
	if strings.HasPrefix(mv.dest, MemoryPrefix) && q.db.Dir != "" {
		return "a queue stored in a file never moves a message into memory"
	}
	switch mv.kind {
	case kindDeadLetter:
		switch {
		case !q.dead.set:
			return "this handle has no dead-letter policy"
		case mv.dest != q.dead.dlq:
			return "the dead-letter policy names " + q.dead.dlq
		}
		return ""
	case kindRedrive:
		switch {
		case sc.redriveTo != "" && mv.dest == sc.redriveTo:
			return ""
		case slices.Contains(q.targets, mv.dest):
			return ""
		case sc.origins && mv.dest == mv.origin:
			return q.originOK(mv.origin)
		}
		return "no redrive toward it is running"
	}
	return fmt.Sprintf("unknown kind of move %q", mv.kind)
}

// originOK returns "" if a redrive to origins may move a message to the
// recorded origin loc, else why not. With WithMoveTargets only those
// locations qualify; without, any queue store that exists (a recorded
// origin never makes a move create a store). A file store's messages never
// go to memory.
func (q *Queue) originOK(loc string) string {
	switch {
	case loc == "":
		return "no recorded origin"
	case strings.HasPrefix(loc, MemoryPrefix):
		if q.db.Dir != "" {
			return "a queue stored in a file never moves a message into memory"
		}
		return ""
	case len(q.targets) > 0:
		if !slices.Contains(q.targets, loc) {
			return "the recorded origin is none of the handle's move targets"
		}
		return ""
	}
	if fi, err := os.Stat(filepath.Join(loc, FileName)); err != nil || !fi.Mode().IsRegular() {
		return "the recorded origin holds no queue store, and a redrive never creates one"
	}
	return ""
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
		Scan(&mv.token, &mv.dest, &mv.kind, &mv.binding, &mv.attempts, &mv.lastReceipt, &mv.startedAt)
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

// transfer runs steps 2 and 3 of moves, grouped by destination. Moves
// this handle may not finish (mayFinish) are left as they are, hidden in
// this store with their intents, and returned.
func (q *Queue) transfer(ctx context.Context, moves []move, sc scope) ([]move, error) {
	var order []string
	var stuck []move
	groups := map[string][]move{}
	for _, mv := range moves {
		if why := q.mayFinish(mv, sc); why != "" {
			mv.stuck = why
			stuck = append(stuck, mv)
			continue
		}
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
	q.reportStuck(stuck)
	return stuck, errors.Join(errs...)
}

// reportStuck logs the moves left in place because this handle may not
// finish them, when their number changed since the last report.
func (q *Queue) reportStuck(stuck []move) {
	if len(stuck) == 0 || q.stuckLogged.Swap(int64(len(stuck))) == int64(len(stuck)) {
		return
	}
	mv := stuck[0]
	q.hints.log.Warn("queue: unfinished moves toward a destination this handle does not name; left in place, not dropped",
		logKeyStore, q.Path(), "moves", len(stuck), "message", mv.id, "kind", mv.kind, "destination", mv.dest, "reason", mv.stuck)
}

func (q *Queue) transferTo(ctx context.Context, dest string, moves []move) error {
	present := 0
	for _, mv := range moves {
		if mv.present {
			present++
		}
	}
	if present > 0 {
		if err := q.lastErrors(ctx, moves); err != nil {
			return err
		}
		d, err := q.destination(ctx, dest)
		if err != nil {
			return err
		}
		// The intents must be durable here before the destination's
		// arrival is (its handle commits with durability full): else a
		// power cut can keep the arrival and drop the intent, and the
		// message is in both stores.
		if err := q.db.SyncWAL(); err != nil {
			return opErr(err, "sync the moves of %d messages before they arrive in %s", present, dest)
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
			if _, err := tx.Exec(ctx, stmtDeleteError, mv.id); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, stmtDeleteAttrs, mv.id); err != nil {
				return err
			}
		}
		return nil
	})
	return opErr(err, "remove %d moved messages from %s", len(moves), q.Location())
}

// arrive is step 2 for one message: the arrival record of this move (by
// its token), and the message only if the record is new. It reports
// whether the message was added. Either way, once the transaction commits
// the destination holds the record of this move: its arrival is confirmed.
func arrive(ctx context.Context, tx *sqlstore.Tx, from string, mv move, now int64) (bool, error) {
	if mv.kind != kindDeadLetter && mv.kind != kindRedrive {
		return false, fmt.Errorf("move of message %d: unknown kind %q", mv.id, mv.kind)
	}
	if mv.token == "" {
		return false, fmt.Errorf("move of message %d: no token", mv.id)
	}
	res, err := tx.Exec(ctx, stmtLegacyArrival, mv.token, from, mv.id, mv.kind, mv.startedAt)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return false, err // arrived under an older localcloud, before step 3
	}
	res, err = tx.Exec(ctx, stmtArrival, mv.token, mv.kind, from, mv.id, mv.binding, mv.attempts, mv.lastReceipt, mv.enqueuedAt, now)
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
	if mv.kind == kindDeadLetter {
		if mv.reason != "" {
			_, err = tx.Exec(ctx, stmtDeadReason, id, mv.reason)
		} else {
			_, err = tx.Exec(ctx, stmtDeadReasonClear, id)
		}
		if err != nil {
			return false, err
		}
	}
	if _, err = tx.Exec(ctx, stmtArrivalID, mv.token, id); err != nil {
		return false, err
	}
	if mv.lastError != "" {
		if _, err := tx.Exec(ctx, stmtSetError, id, mv.lastError, now); err != nil {
			return false, fmt.Errorf("carry the last error of message %d: %w", mv.id, err)
		}
	}
	if len(mv.attrs) > 0 {
		if _, err := tx.Exec(ctx, stmtSetAttrs, id, string(mv.attrs)); err != nil {
			return false, fmt.Errorf("carry the attributes of message %d: %w", mv.id, err)
		}
	}
	return true, nil
}

// errQueueClosed is the error of a move on a closed handle.
var errQueueClosed = errors.New("queue handle closed")

// destination returns the handle of this handle's moves into loc, opening
// it on first use. It commits with synchronous=FULL (see the top of the
// file) and lives until q is closed.
func (q *Queue) destination(ctx context.Context, loc string) (*Queue, error) {
	if same, how := sameStore(loc, q.Location()); same {
		return nil, bindings.Errorf(bindings.CodeQueueOperationFailed, "move to %s: it %s this queue's own store %s", loc, how, q.Location())
	}
	q.destMu.Lock()
	defer q.destMu.Unlock()
	if q.destClosed {
		return nil, opErr(errQueueClosed, "move to %s", loc)
	}
	if d := q.dests[loc]; d != nil {
		return d, nil
	}
	// internal: the handle runs no recovery of its own (which could open
	// handles back on the source).
	d, err := openLocation(ctx, loc, options{clock: q.now, logger: q.hints.log,
		durability: bindings.DurabilityFull, internal: true})
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
