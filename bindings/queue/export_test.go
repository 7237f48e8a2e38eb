package queue

import (
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/sqlstore"
	"github.com/localcloud/localcloud/notify"
)

// Test-only bridges for the external tests in package queue_test to the
// SQLite engine under a handle.

// ExportEngine returns the SQLite queue under q, for tests that read its
// tables; nil for a queue of another engine.
func ExportEngine(q *Queue) *sqlitequeue.Queue {
	e, _ := q.drv.(*sqlitequeue.Queue)
	return e
}

// ExportDB returns the store plumbing of the SQLite queue under q; nil for
// a queue of another engine.
func ExportDB(q *Queue) *sqlstore.DB {
	if e := ExportEngine(q); e != nil {
		return e.DB()
	}
	return nil
}

// ExportWithoutLocalWake stops a handle's Send and Nack from waking waiters
// of this process directly, so only NATS hints and polls wake them: the path
// a consumer in another process takes.
func ExportWithoutLocalWake() Option { return func(o *options) { o.wake.noLocalWake = true } }

// ExportHintWakes returns how many hints (and reconnections) the handle's
// shared subscription has seen, making the subscription if needed.
func ExportHintWakes(q *Queue) uint64 { return ExportEngine(q).HintWakes() }

// ExportWaiting returns how many ReceiveWait and Consume goroutines of the
// handle are blocked waiting for a wake-up.
func ExportWaiting(q *Queue) int { return int(q.waiting.Load()) }

// ExportHintStats returns the counters of the handle's shared publisher.
func ExportHintStats(q *Queue) notify.PublisherStats { return ExportEngine(q).HintStats() }
