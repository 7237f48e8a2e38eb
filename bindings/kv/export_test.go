package kv

import (
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// ExportDB returns the store plumbing of the SQLite store under s, for
// tests that read its table; nil for a store of another engine.
func ExportDB(s *Store) *sqlstore.DB {
	if e, ok := s.drv.(*sqlitekv.Store); ok {
		return e.DB()
	}
	return nil
}

// ExportValidKey, ExportEncodeCursor and ExportDecodeCursor are the key
// rule and the Scan cursor codec, for the fuzz tests.
var (
	ExportValidKey     = validKey
	ExportEncodeCursor = encodeCursor
	ExportDecodeCursor = decodeCursor
)
