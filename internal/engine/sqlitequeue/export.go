package sqlitequeue

import "github.com/localcloud/localcloud/notify"

// Hooks for localcloud's own tests (this package is internal, so apps never
// see them).

// SetMaxMovesPerClaim sets the cap of dead letters one claim starts. For
// the crash test's helper process only: it is not safe while handles are in
// use.
func SetMaxMovesPerClaim(n int) { maxMovesPerClaim = n }

// ParseReceiptParts and FormatReceipt are the receipt handle codec, for the
// fuzz tests.
var (
	ParseReceiptParts = parseReceipt
	FormatReceipt     = formatReceipt
)

// StmtDue is the receive select, for the query-plan test.
const StmtDue = stmtDue

// StmtClaimOne is the one-statement claim of Receive(1).
const StmtClaimOne = stmtClaimOne

// HintWakes returns how many hints (and reconnections) the handle's shared
// subscription has seen, making the subscription if needed.
func (q *Queue) HintWakes() uint64 {
	if s := q.hints.subscription(); s != nil {
		return s.wakes.Load()
	}
	return 0
}

// HintStats returns the counters of the handle's shared publisher.
func (q *Queue) HintStats() notify.PublisherStats {
	if q.hints.pub == nil {
		return notify.PublisherStats{}
	}
	return q.hints.pub.stats()
}

// HintOptions returns the NATS URL, token and subject the handle hints on.
func (q *Queue) HintOptions() (url, token, subject string) {
	return q.hints.opts.url, q.hints.opts.token, q.hints.opts.subject
}

// DeadLetterPolicy returns the handle's dead-letter policy (0 and "" for
// none) and its binding name.
func (q *Queue) DeadLetterPolicy() (maxAttempts int, dlq, binding string) {
	return q.dead.maxAttempts, q.dead.dlq, q.binding
}
