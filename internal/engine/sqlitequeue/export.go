package sqlitequeue

import "github.com/localcloud/localcloud/notify"

// Hooks for localcloud's own tests (this package is internal, so apps never
// see them).

// The statements of a batch claim and an ack, for the query-plan test and
// the floor benchmark (bindings/bench), which runs them raw: the select of
// up to ?2 ids due at ?1 in delivery order, the spec's claim of one and the
// spec's delete.
const (
	StmtDue   = stmtDue
	StmtClaim = stmtClaim
	StmtAck   = stmtAck
)

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
