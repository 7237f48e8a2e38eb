// Package admin gives localcloud's CLI, `up` and tests what apps do not get:
// the SQLite engine under a public kv or queue handle, for the operations
// only that engine has (check, backup, restore, raw reads, the page size,
// the hint source's change detection). Each function fails with a clear
// error for a handle of another engine.
package admin

import (
	"fmt"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/internal/engine/hook"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// KV returns the SQLite engine's store under s.
func KV(s *kv.Store) (*sqlitekv.Store, error) {
	d, ok := hook.KVDriver(s).(*sqlitekv.Store)
	if !ok {
		return nil, fmt.Errorf("reach the SQLite store of KV handle %q: it is on another engine (%T)", s.Path(), hook.KVDriver(s))
	}
	return d, nil
}

// KVDB returns the store plumbing under s, or panics for a handle of
// another engine: for tests and for tools that opened s with kv.Open.
func KVDB(s *kv.Store) *sqlstore.DB {
	d, err := KV(s)
	if err != nil {
		panic(err)
	}
	return d.DB()
}

// Queue returns the SQLite engine's queue under q.
func Queue(q *queue.Queue) (*sqlitequeue.Queue, error) {
	d, ok := hook.QueueDriver(q).(*sqlitequeue.Queue)
	if !ok {
		return nil, fmt.Errorf("reach the SQLite store of queue handle %q: it is on another engine (%T)", q.Path(), hook.QueueDriver(q))
	}
	return d, nil
}

// QueueDB returns the store plumbing under q, or panics for a handle of
// another engine: for tests and for tools that opened q with queue.Open.
func QueueDB(q *queue.Queue) *sqlstore.DB {
	d, err := Queue(q)
	if err != nil {
		panic(err)
	}
	return d.DB()
}
