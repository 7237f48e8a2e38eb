package kv

import (
	"context"

	"github.com/localcloud/localcloud/bindings/kv/driver"
)

// Stats are a KV store's counts at one moment.
type Stats = driver.Stats

// Entry is a live key's value with its expiry, as Lookup sees it.
type Entry = driver.Entry

// Stats counts the store's keys in one read. It never deletes an expired
// row, so it works on a handle opened WithReadOnly.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	st, err := s.drv.Stats(ctx)
	if err != nil {
		return Stats{}, opErr(err, "count keys")
	}
	return st, nil
}

// Lookup returns the value of key with its expiry, and whether it is live.
// Unlike Get it never writes: an expired key is reported absent and left
// as it is, so it works on a handle opened WithReadOnly.
func (s *Store) Lookup(ctx context.Context, key string) (Entry, bool, error) {
	if err := validKey("key", key); err != nil {
		return Entry{}, false, err
	}
	e, ok, err := s.drv.Lookup(ctx, key)
	if err != nil {
		return Entry{}, false, opErr(err, "look up %q", key)
	}
	return e, ok, nil
}
