package sqlitekv_test

import (
	"context"
	"sync"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// The tests of this file's package drive the engine through the public
// API (kv.New over the engine's own handle, as localcloud's tools open it)
// and read its table through the engine's handle.

var ctx = context.Background()

// handles holds the engine's handle under each public one the tests open.
var handles sync.Map // *kv.Store -> *sqlitekv.Store

// openKV opens the store at loc (a directory or "memory:NAME") as kv.Open
// does, keeping the engine's handle for dbOf.
func openKV(ctx context.Context, loc string, opts ...kv.Option) (*kv.Store, error) {
	cfg, err := kv.EngineConfig(loc, opts...)
	if err != nil {
		return nil, err
	}
	e, err := sqlitekv.OpenConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s, err := kv.New(e)
	if err != nil {
		_ = e.Close()
		return nil, err
	}
	handles.Store(s, e)
	return s, nil
}

// openKVMemory opens the in-memory store called name, as kv.OpenMemory
// does.
func openKVMemory(ctx context.Context, name string, opts ...kv.Option) (*kv.Store, error) {
	return openKV(ctx, kv.MemoryPrefix+name, opts...)
}

// dbOf is the store plumbing under s, which openKV opened.
func dbOf(s *kv.Store) *sqlstore.DB {
	e, _ := handles.Load(s)
	es, _ := e.(*sqlitekv.Store)
	return es.DB()
}
