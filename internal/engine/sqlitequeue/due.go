package sqlitequeue

// The select of due messages, and the indexes that make its cost
// independent of the rows that are not due.
//
// The spec's select (SELECT id FROM messages WHERE visible_at <= ?now
// ORDER BY enqueued_at, id LIMIT ?n) asks for the first rows in one order
// (enqueued_at, id) among those passing a bound on another column
// (visible_at). No single B-tree answers that without reading rows it does
// not return: the spec's index (visible_at, ...) reads and sorts every due
// row, and an index in delivery order reads every row that is not due ahead
// of the first due ones: 1,000,000 delayed messages sent before 20,000 due
// ones made each receive read 1,000,000 index entries (about 100 ms).
//
// So localcloud splits the rows in two by a deterministic test, each half
// with an index a partial index can hold:
//
//   - fresh rows, visible_at = enqueued_at: sent without a delay and never
//     delivered since (the spec's send writes visible_at = enqueued_at).
//     One is due exactly when its enqueued_at <= now, so in
//     lc_messages_fresh, ordered by (enqueued_at, id), the due ones are a
//     prefix: the first n are read and nothing else.
//   - held rows, visible_at IS NOT enqueued_at: delayed sends, messages in
//     flight, nacked with a back-off, moving to a dead-letter queue. For
//     them two reads, the cheaper one used:
//     (a) the first 64 held rows in delivery order (lc_messages_held): when
//     n of them are due, those are the first n due held rows;
//     (b) otherwise every due held row through lc_messages_held_due
//     (visible_at first), sorted, the first n kept.
//     (a) finds a mass of held rows that all came due (a delayed batch, the
//     leases of a killed consumer) in n reads; (b) skips every held row not
//     yet due (a delayed backlog, in-flight rows) without reading it.
//
// The two halves are merged in (enqueued_at, id) order. The cost is n plus
// at most 64, plus, only when (a) fails, the number of due held rows: it
// does not grow with the rows that are not due. (What remains: more than 64
// held rows not due ahead of the first n due held rows AND many due held
// rows, e.g. 1,000,000 delayed messages half of which came due, interleaved
// in send order, with few fresh ones ahead of them.)
//
// The result is the spec's select, row for row and in order: every row with
// a non-NULL visible_at is in exactly one half (IS NOT counts NULL as a
// value; a NULL visible_at is never due), a fresh row's visible_at <= now
// is its enqueued_at <= now, and (a) and (b) each return the first due held
// rows. TestDueSelectMatchesSpec compares the two on odd rows.
//
// `ORDER BY +enqueued_at` in (b) keeps SQLite from answering it through
// lc_messages_held in order (which would read every held row not due);
// MATERIALIZED makes (a) run once. The spec's index stays, as the spec
// writes it; a spec-exact program's select uses it and is right, only
// slower.

// Indexes is localcloud's own DDL for the due select (see above). A
// spec-exact reader ignores these indexes.
const Indexes = `CREATE INDEX IF NOT EXISTS lc_messages_fresh ON messages (enqueued_at, id, visible_at) WHERE visible_at = enqueued_at;
CREATE INDEX IF NOT EXISTS lc_messages_held ON messages (enqueued_at, id, visible_at) WHERE visible_at IS NOT enqueued_at;
CREATE INDEX IF NOT EXISTS lc_messages_held_due ON messages (visible_at, enqueued_at, id) WHERE visible_at IS NOT enqueued_at;`

// retiredIndexes are indexes earlier versions created, dropped on the next
// read-write open: lc_messages_order, in delivery order, read every row not
// due ahead of the due ones.
var retiredIndexes = []string{"lc_messages_order"}

const (
	// stmtDue is the spec's select of up to ?2 ids due at ?1, in order.
	stmtDue = `WITH head AS MATERIALIZED (SELECT id, enqueued_at FROM (SELECT id, enqueued_at, visible_at FROM messages
WHERE visible_at IS NOT enqueued_at ORDER BY enqueued_at, id LIMIT 64) WHERE visible_at <= ?1 LIMIT ?2)
SELECT id, enqueued_at FROM messages WHERE visible_at = enqueued_at AND enqueued_at <= ?1
UNION ALL SELECT id, enqueued_at FROM head WHERE (SELECT COUNT(*) FROM head) = ?2
UNION ALL SELECT * FROM (SELECT id, enqueued_at FROM messages WHERE visible_at IS NOT enqueued_at AND visible_at <= ?1
AND (SELECT COUNT(*) FROM head) < ?2 ORDER BY +enqueued_at, id LIMIT ?2)
ORDER BY enqueued_at, id LIMIT ?2`

	// stmtClaimOne is the claim of a receive of one message: the spec's
	// select (as stmtDue, for one row) and claim statement folded into one
	// statement, its own transaction. It claims only a row it can return
	// (rows.go): enqueued_at < '' holds for INTEGER and REAL only (TEXT and
	// BLOB sort above every number, NULL compares to nothing; a fresh due
	// row's enqueued_at <= ?3 is a number already), and the NULL tests,
	// always true on the spec's schema, are checked on the one row claimed.
	// When it claims nothing while something is due, stmtOddDue tells
	// whether the batch claim, which skips such rows, must look.
	stmtClaimOne = `UPDATE messages
SET visible_at = ?1, attempt = attempt + 1,
receipt_handle = ?2 WHERE id = (WITH head AS MATERIALIZED (SELECT id, enqueued_at FROM (SELECT id, enqueued_at, visible_at FROM messages
WHERE visible_at IS NOT enqueued_at ORDER BY enqueued_at, id LIMIT 64) WHERE visible_at <= ?3 AND enqueued_at < '' LIMIT 1)
SELECT id FROM (SELECT id, enqueued_at FROM messages WHERE visible_at = enqueued_at AND enqueued_at <= ?3
UNION ALL SELECT id, enqueued_at FROM head
UNION ALL SELECT * FROM (SELECT id, enqueued_at FROM messages WHERE visible_at IS NOT enqueued_at AND visible_at <= ?3 AND enqueued_at < ''
AND NOT EXISTS (SELECT 1 FROM head) ORDER BY +enqueued_at, id LIMIT 1)
ORDER BY enqueued_at, id LIMIT 1))
AND payload_type IS NOT NULL AND payload_data IS NOT NULL AND attempt IS NOT NULL
RETURNING id, enqueued_at, payload_type, payload_data, attempt`
)
