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
// So localcloud splits the rows in three by deterministic tests, each part
// with partial indexes of its own:
//
//   - fresh rows, attempt IS 0 AND visible_at = enqueued_at: sent without a
//     delay and never delivered (the spec's send writes visible_at =
//     enqueued_at). One is due exactly when its enqueued_at <= now, so in
//     lc_messages_fresh, ordered by (enqueued_at, id), the due ones are a
//     prefix: the first n are read and nothing else.
//   - delayed rows, attempt IS 0 AND visible_at IS NOT enqueued_at: sent
//     with a delay (or redriven), never delivered. Two reads, the cheaper
//     one used: (a) the first 64 delayed rows in delivery order
//     (lc_messages_delayed): when n of them are due, those are the first n
//     due delayed rows; (b) otherwise every due delayed row through
//     lc_messages_delayed_due (visible_at first), sorted, the first n kept.
//     (a) finds a delayed batch that came due in n reads; (b) skips every
//     delayed row not yet due without reading it.
//   - delivered rows, attempt IS NOT 0: in flight, or due again (a lease
//     that ended, a nack), or being moved to a dead-letter queue. The due
//     ones through lc_messages_delivered (visible_at first), sorted, the
//     first n kept: the rows in flight are not read.
//
// The parts are merged in (enqueued_at, id) order. The cost is n, plus 64,
// plus the due delivered rows (redeliveries, usually few), plus the due
// delayed rows only when (a) fails: it does not grow with the rows that
// are not due, delayed or in flight. What remains: more than 64 delayed
// rows not due ahead of the first n due ones AND many due delayed rows
// (1,000,000 delayed sends half of which came due, interleaved in send
// order), and many due redeliveries at once (the leases of a consumer that
// held thousands of messages ended): each receive then sorts those.
//
// On the write path a row is in the spec's index and one of these (a
// delayed one in two), as with the single index in delivery order before:
// a send, claim and ack cost the same number of index writes.
//
// The result is the spec's select, row for row and in order: every row is
// in at most one part, and every due row in one (IS and IS NOT treat NULL
// as a value; the only rows in no part have a NULL visible_at, never due),
// a fresh row's
// visible_at <= now is its enqueued_at <= now, and (a) and (b) each return
// the first due delayed rows. TestDueSelectMatchesSpec compares the two on
// odd rows.
//
// `ORDER BY +enqueued_at` keeps SQLite from answering (b) through
// lc_messages_delayed in order (which would read every delayed row not
// due); MATERIALIZED makes (a) run once. The spec's index stays, as the
// spec writes it; a spec-exact program's select uses it and is right, only
// slower.

// Indexes is localcloud's own DDL for the due select (see above). A
// spec-exact reader ignores these indexes.
const Indexes = `CREATE INDEX IF NOT EXISTS lc_messages_fresh ON messages (enqueued_at, id, visible_at) WHERE attempt IS 0 AND visible_at = enqueued_at;
CREATE INDEX IF NOT EXISTS lc_messages_delayed ON messages (enqueued_at, id, visible_at) WHERE attempt IS 0 AND visible_at IS NOT enqueued_at;
CREATE INDEX IF NOT EXISTS lc_messages_delayed_due ON messages (visible_at, enqueued_at, id) WHERE attempt IS 0 AND visible_at IS NOT enqueued_at;
CREATE INDEX IF NOT EXISTS lc_messages_delivered ON messages (visible_at, enqueued_at, id, attempt) WHERE attempt IS NOT 0;`

// retiredIndexes are indexes earlier versions created, dropped on the next
// read-write open: lc_messages_order, in delivery order, read every row not
// due ahead of the due ones.
var retiredIndexes = []string{"lc_messages_order"}

const (
	// stmtDue is the spec's select of up to ?2 ids due at ?1, in order.
	stmtDue = `WITH head AS MATERIALIZED (SELECT id, enqueued_at FROM (SELECT id, enqueued_at, visible_at FROM messages
WHERE attempt IS 0 AND visible_at IS NOT enqueued_at ORDER BY enqueued_at, id LIMIT 64) WHERE visible_at <= ?1 LIMIT ?2)
SELECT id, enqueued_at FROM messages WHERE attempt IS 0 AND visible_at = enqueued_at AND enqueued_at <= ?1
UNION ALL SELECT id, enqueued_at FROM head WHERE (SELECT COUNT(*) FROM head) = ?2
UNION ALL SELECT * FROM (SELECT id, enqueued_at FROM messages WHERE attempt IS 0 AND visible_at IS NOT enqueued_at AND visible_at <= ?1
AND (SELECT COUNT(*) FROM head) < ?2 ORDER BY +enqueued_at, id LIMIT ?2)
UNION ALL SELECT * FROM (SELECT id, enqueued_at FROM messages WHERE attempt IS NOT 0 AND visible_at <= ?1 ORDER BY +enqueued_at, id LIMIT ?2)
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
WHERE attempt IS 0 AND visible_at IS NOT enqueued_at ORDER BY enqueued_at, id LIMIT 64) WHERE visible_at <= ?3 AND enqueued_at < '' LIMIT 1)
SELECT id FROM (SELECT id, enqueued_at FROM messages WHERE attempt IS 0 AND visible_at = enqueued_at AND enqueued_at <= ?3
UNION ALL SELECT id, enqueued_at FROM head
UNION ALL SELECT * FROM (SELECT id, enqueued_at FROM messages WHERE attempt IS 0 AND visible_at IS NOT enqueued_at AND visible_at <= ?3 AND enqueued_at < ''
AND NOT EXISTS (SELECT 1 FROM head) ORDER BY +enqueued_at, id LIMIT 1)
UNION ALL SELECT * FROM (SELECT id, enqueued_at FROM messages WHERE attempt IS NOT 0 AND visible_at <= ?3 AND enqueued_at < '' ORDER BY +enqueued_at, id LIMIT 1)
ORDER BY enqueued_at, id LIMIT 1))
AND payload_type IS NOT NULL AND payload_data IS NOT NULL AND attempt IS NOT NULL
RETURNING id, enqueued_at, payload_type, payload_data, attempt, ` + claimAttrs
)
