// Package sqlitetools is engine.Tools of the SQLite engine (engine:
// sqlite, the default): a binding's store is a directory holding one
// SQLite file of the localkv.v1 or localqueue.v1 format. It owns
// everything localcloud's tools do to such files beyond the public API:
// opening a binding with the stack's rules, the stat-only health of an
// open store, check (file modes, marker, schema, integrity, rows another
// program wrote, unfinished moves), backup and restore, tail, the receipt
// rule, temporary stores for bench. Every SQL statement of the tools is in
// the engine packages (sqlitekv, sqlitequeue) or sqlstore, run through
// the engine's own handle, which Open keeps beside the public one.
//
// It registers itself with package engine; internal/supervisor links it
// in.
package sqlitetools

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

func init() { engine.Register(Tools{}) }

// Tools is engine.Tools of the SQLite engine. Its zero value is ready.
type Tools struct{}

// Name is "sqlite".
func (Tools) Name() string { return config.EngineSQLite }

// Traits are hints, lease ends in peek, several processes on one store,
// KV stores closed while idle (each open one holds about six
// descriptors).
func (Tools) Traits() engine.Traits {
	return engine.Traits{Hints: true, LeaseEnds: true, Processes: true, CloseIdle: true}
}

// Location is the store's directory.
func (Tools) Location(b config.Binding) string { return b.Path }

// formatOf is the store format of a binding type.
func formatOf(t config.Type) sqlstore.Format {
	if t == config.TypeQueue {
		return sqlitequeue.Format()
	}
	return sqlitekv.Format()
}

// File returns the database file of b's store.
func File(b config.Binding) string { return filepath.Join(b.Path, formatOf(b.Type).File) }

// Place is the store's directory and database file.
func (Tools) Place(b config.Binding) engine.Place {
	return engine.Place{Dir: b.Path, File: File(b)}
}

// Where is the store's directory.
func (Tools) Where(b config.Binding) string { return b.Path }

// Describe is "file (localkv.v1)" or "file (localqueue.v1)".
func (Tools) Describe(b config.Binding) string { return "file (" + formatOf(b.Type).Marker + ")" }

// Needs asks nothing of up's server.
func (Tools) Needs(*config.Stack, config.Binding) engine.Needs { return engine.Needs{} }

// AppBinding is a kv.EnvBinding or queue.EnvBinding: the store directory,
// for a queue with its hint subject, its settings and its dead-letter
// policy (so every process of the app enforces the same).
func (Tools) AppBinding(st *config.Stack, b config.Binding, _ string) (any, error) {
	switch b.Type {
	case config.TypeKV:
		return kv.EnvBinding{Service: kv.Service, DataDir: b.Path, Durability: b.Durability}, nil
	case config.TypeQueue:
		eb := queue.EnvBinding{Service: queue.Service, QueuePath: b.Path, EnvSettings: engine.QueueEnvSettings(b)}
		eb.Subject = config.Subject(st.Name, b.Name)
		if dl, ok := st.Binding(b.DeadLetter); ok && b.MaxAttempts > 0 {
			eb.MaxAttempts = b.MaxAttempts
			eb.DeadLetter = &queue.EnvDeadLetter{Binding: dl.Name, QueuePath: dl.Path}
		}
		return eb, nil
	}
	return nil, fmt.Errorf("binding %s: unknown type %q", b.Name, b.Type)
}

// ValidReceipt checks r against the SQLite engine's receipt rule,
// "{id}:{uuid}" (sqlitequeue.ParseReceipt).
func (Tools) ValidReceipt(_ config.Binding, r string) error {
	_, err := sqlitequeue.ParseReceipt(r)
	return err
}

// Exists reports whether b's database file exists.
func (Tools) Exists(_ context.Context, _ *engine.Env, b config.Binding) (bool, error) {
	return fileExists(File(b))
}

// durability is b's durability, checked.
func durability(b config.Binding) (bindings.Durability, error) {
	d, err := bindings.ParseDurability(b.Durability)
	if err != nil {
		return "", fmt.Errorf("binding %s: %w", b.Name, err)
	}
	return d, nil
}
