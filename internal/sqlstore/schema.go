package sqlstore

// The format's objects on open: creating what is missing, and the marker
// check of a store's tables.

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/localcloud/localcloud/bindings"
)

func (db *DB) initSchema(ctx context.Context, tx *Tx) error {
	var tables []string
	rows, err := tx.Query(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\'`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		tables = append(tables, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(tables) == 0 {
		if _, err := tx.Exec(ctx, MetaDDL); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT OR IGNORE INTO meta (key, value) VALUES ('format', ?)`, db.Format.Marker); err != nil {
			return err
		}
	}
	if err := db.checkMarkerTx(ctx, tx, tables); err != nil {
		return err
	}
	// Before any statement that writes (and so could fire a trigger):
	// nothing has been written in this transaction yet.
	complete, err := checkSchema(ctx, db.wconn, db.Path, db.Format)
	if err != nil {
		return err
	}
	if complete {
		// Every object is there: the DDL (CREATE ... IF NOT EXISTS only)
		// would change nothing, and parsing it is a good part of the
		// open of an existing store.
		return nil
	}
	if _, err := tx.Exec(ctx, db.Format.Schema); err != nil {
		return err
	}
	for _, name := range db.Format.Retired {
		if _, err := tx.Exec(ctx, `DROP INDEX IF EXISTS "`+name+`"`); err != nil {
			return err
		}
	}
	if db.Format.Extra != "" {
		if _, err := tx.Exec(ctx, db.Format.Extra); err != nil {
			return err
		}
	}
	return nil
}

func (db *DB) checkMarkerTx(ctx context.Context, tx *Tx, tables []string) error {
	hasMeta := len(tables) == 0
	for _, t := range tables {
		if t == "meta" {
			hasMeta = true
		}
	}
	if !hasMeta {
		return bindings.Errorf(bindings.CodeBindingSetupFailed,
			"open store %q: found a database without a format marker (tables: %s), supported format is %s; the file was left untouched",
			db.Path, strings.Join(tables, ", "), db.Format.Marker)
	}
	var found string
	err := tx.QueryRow(ctx, `SELECT value FROM meta WHERE key = 'format'`).Scan(&found)
	return db.markerResult(found, err)
}

func (db *DB) checkMarker(ctx context.Context, q *sql.DB) error {
	var found string
	err := q.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'format'`).Scan(&found)
	return db.markerResult(found, err)
}

func (db *DB) markerResult(found string, err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return bindings.Errorf(bindings.CodeBindingSetupFailed,
			"open store %q: found no format marker in meta, supported format is %s; the file was left untouched",
			db.Path, db.Format.Marker)
	}
	if err != nil {
		return bindings.Wrap(bindings.CodeBindingSetupFailed, err, "open store %q: read format marker", db.Path)
	}
	if found != db.Format.Marker {
		return bindings.Errorf(bindings.CodeBindingSetupFailed,
			"open store %q: found format %q, supported format is %q; the file was left untouched",
			db.Path, found, db.Format.Marker)
	}
	return nil
}
