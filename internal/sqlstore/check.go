package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/localcloud/localcloud/bindings"
)

// Errors of the inspection, backup and restore helpers.
var (
	// ErrVerifyFailed is matched by a [*VerifyError]: a database file is not
	// a sound store of the expected format.
	ErrVerifyFailed = errors.New("database failed verification")
	// ErrExists: the destination of a backup already exists; nothing is
	// ever overwritten.
	ErrExists = errors.New("destination already exists")
	// ErrStoreInUse: another process has the store open, so it cannot be
	// replaced safely.
	ErrStoreInUse = errors.New("store is open in another process")
	// ErrStoreBusy: the store's write lock stayed held by a writer for
	// longer than the restore waits.
	ErrStoreBusy = errors.New("store's write lock is held")
)

// Problem kinds reported by [Verify].
const (
	// ProblemOpen: the file cannot be read as a SQLite database.
	ProblemOpen = "open"
	// ProblemMarker: the meta table or its format row is missing or names
	// another format.
	ProblemMarker = "marker"
	// ProblemSchemaMissing: an object of the format's DDL is missing.
	ProblemSchemaMissing = "schema-missing"
	// ProblemSchemaChanged: an object exists with other SQL than the DDL.
	ProblemSchemaChanged = "schema-changed"
	// ProblemSchemaUnknown: an object the format does not define.
	ProblemSchemaUnknown = "schema-unknown"
	// ProblemIntegrity: a line of PRAGMA integrity_check other than "ok".
	ProblemIntegrity = "integrity"
	// ProblemRow: a row another program wrote that localcloud has to
	// coerce or cannot use (Format.CheckRows).
	ProblemRow = "row"
)

// Problem is one finding of [Verify].
type Problem struct {
	Kind string `json:"kind"`
	// Object is the schema object ("table kv"), or "" when none applies.
	Object  string `json:"object,omitempty"`
	Message string `json:"message"`
}

func (p Problem) String() string { return p.Kind + ": " + p.Message }

// Verification is the result of [Verify]. Notes are findings that are not
// problems (localcloud's own index missing from a spec-exact store).
type Verification struct {
	Problems []Problem
	Notes    []string
	// Objects is the number of schema objects compared.
	Objects int
}

// OK reports whether no problem was found.
func (v Verification) OK() bool { return len(v.Problems) == 0 }

// VerifyError carries the problems of a database that failed verification.
type VerifyError struct {
	Path     string
	Problems []Problem
}

func (e *VerifyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s failed verification (%d problem", e.Path, len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	b.WriteString(")")
	for _, p := range e.Problems {
		b.WriteString("\n" + p.String())
	}
	return b.String()
}

// Unwrap returns ErrVerifyFailed.
func (e *VerifyError) Unwrap() error { return ErrVerifyFailed }

// readOnlyURI is a file: URI that opens path read-only: SQLite never writes
// the database through it. On a WAL database SQLite still needs the -shm
// and -wal files to read; if they are missing it creates them (with the
// database file's mode), empty, and leaves them behind.
func readOnlyURI(path string, queryOnly bool) string {
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeoutMillis))
	if queryOnly {
		// query_only also refuses VACUUM INTO, so Snapshot leaves it off.
		q.Add("_pragma", "query_only(1)")
	}
	return fileURI(path, q)
}

// immutableURI opens path read-only as a file nothing changes: SQLite reads
// the database file alone, ignores a -wal beside it and creates no -shm.
func immutableURI(path string) string {
	q := url.Values{}
	q.Set("mode", "ro")
	q.Set("immutable", "1")
	q.Add("_pragma", "query_only(1)")
	return fileURI(path, q)
}

// Verify checks the database file at path against the format f without
// writing to it: the meta format marker, the schema (every object of
// MetaDDL, f.Schema and f.Extra, compared as normalized SQL, plus any object
// the format does not define) and PRAGMA integrity_check. Objects of f.Extra
// (localcloud's own indexes) may be missing: that is a note, since a
// spec-exact store lacks them and localcloud creates them on its next open.
//
// Before SQLite reads anything, the database header and a -wal beside the
// file are checked as Open checks them (a wiped or cut file is a
// ProblemFile, a -wal that cannot be shown to belong to the database a
// ProblemWAL). Such a -wal is never read: the database file is then
// verified on its own (SQLite's immutable mode), so not even the -shm a
// read-only connection would build from the -wal is written.
//
// With f.CheckRows, the rows are then read and every odd one (written by
// another program) is a ProblemRow.
//
// Every finding is a Problem; the error is only for a cancelled ctx or a
// path that is not a regular file. Verify must not run in a process that
// has the database open (it reads the header with its own descriptor).
func Verify(ctx context.Context, path string, f Format) (Verification, error) {
	var v Verification
	fi, err := os.Stat(path)
	if err != nil {
		return v, err
	}
	if !fi.Mode().IsRegular() {
		return v, fmt.Errorf("verify %s: not a regular file (mode %s)", path, fi.Mode())
	}
	uri := readOnlyURI(path, true)
	h, p := readHeader(path)
	if p != nil {
		v.Problems = append(v.Problems, Problem{Kind: p.kind, Message: p.msg})
		if p.unreadable {
			return v, nil
		}
	}
	if w, p := checkWAL(path, h.pageSize); p != nil {
		v.Problems = append(v.Problems, Problem{Kind: p.kind, Message: p.msg + "; the database file was verified without it"})
		uri = immutableURI(path)
	} else if w == walNone && h.pageSize != 0 {
		if p := h.truncated(path); p != nil {
			v.Problems = append(v.Problems, Problem{Kind: p.kind, Message: p.msg})
		}
	}
	db, err := sql.Open("sqlite", uri)
	if err != nil {
		return v, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return v, ctxOr(ctx, err, &v)
	}
	defer conn.Close()

	// A database of no objects at all is a store whose creation never
	// reached the disk (an empty file, or a power cut after the switch to
	// WAL and before the tables' commit was synced): nothing of anyone's
	// is in it, and Open creates it as a new store (see checkRecovered).
	var objects int
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master").Scan(&objects); err != nil {
		return v, ctxOr(ctx, err, &v)
	}
	if objects == 0 && len(v.Problems) == 0 {
		v.Notes = append(v.Notes, "the database holds no tables: a store not created yet (its creation did not reach the disk); localcloud creates it on its next read-write open")
		return v, nil
	}
	markerOK, err := verifyMarker(ctx, conn, f, &v)
	if err != nil {
		return v, ctxOr(ctx, err, &v)
	}
	if markerOK {
		if err := verifySchema(ctx, conn, f, &v); err != nil {
			return v, ctxOr(ctx, err, &v)
		}
		if f.CheckRows != nil {
			probs, err := f.CheckRows(ctx, conn)
			if err != nil {
				if ctx.Err() != nil {
					return v, ctx.Err()
				}
				v.Problems = append(v.Problems, Problem{Kind: ProblemRow, Message: "cannot read the rows: " + err.Error()})
			}
			v.Problems = append(v.Problems, probs...)
		}
	}
	if err := verifyIntegrity(ctx, conn, &v); err != nil {
		return v, ctxOr(ctx, err, &v)
	}
	return v, nil
}

// ctxOr returns ctx's error if it ended, else records err as an open
// problem and returns nil.
func ctxOr(ctx context.Context, err error, v *Verification) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	v.Problems = append(v.Problems, Problem{Kind: ProblemOpen, Message: "cannot read the file as a SQLite database: " + err.Error()})
	return nil
}

func verifyMarker(ctx context.Context, conn *sql.Conn, f Format, v *Verification) (bool, error) {
	var n int
	if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'`).Scan(&n); err != nil {
		return false, err
	}
	if n == 0 {
		v.Problems = append(v.Problems, Problem{Kind: ProblemMarker, Object: "table meta",
			Message: fmt.Sprintf("no meta table, so no format marker: not a %s store", f.Marker)})
		return false, nil
	}
	var found string
	err := conn.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'format'`).Scan(&found)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		v.Problems = append(v.Problems, Problem{Kind: ProblemMarker, Object: "table meta",
			Message: fmt.Sprintf("meta has no 'format' row, want %q", f.Marker)})
		return false, nil
	case err != nil:
		v.Problems = append(v.Problems, Problem{Kind: ProblemMarker, Object: "table meta",
			Message: "cannot read the format marker: " + err.Error()})
		return false, nil
	case found != f.Marker:
		v.Problems = append(v.Problems, Problem{Kind: ProblemMarker, Object: "table meta",
			Message: fmt.Sprintf("foreign format marker %q, want %q", found, f.Marker)})
		return false, nil
	}
	return true, nil
}

// schemaObject is one row of sqlite_master that the format may define.
type schemaObject struct {
	typ, name string
	table     string // tbl_name: the table an index or trigger is on
	sql       string // normalized
	raw       string // as stored
	extra     bool   // localcloud's own (Format.Extra), optional
}

func (o schemaObject) label() string { return o.typ + " " + o.name }

func verifySchema(ctx context.Context, conn *sql.Conn, f Format, v *Verification) error {
	want, err := expectedSchema(ctx, f)
	if err != nil {
		return fmt.Errorf("build the expected schema of %s: %w", f.Marker, err)
	}
	got, err := readSchema(ctx, conn)
	if err != nil {
		return err
	}
	v.Objects = len(want)
	for _, w := range want {
		g, ok := got[w.label()]
		switch {
		case !ok && w.extra:
			v.Notes = append(v.Notes, fmt.Sprintf("localcloud's own %s is missing (a spec-exact store has none); localcloud creates it on its next read-write open", w.label()))
		case !ok:
			v.Problems = append(v.Problems, Problem{Kind: ProblemSchemaMissing, Object: w.label(),
				Message: fmt.Sprintf("%s of %s is missing", w.label(), f.Marker)})
		case g.sql != w.sql:
			v.Problems = append(v.Problems, Problem{Kind: ProblemSchemaChanged, Object: w.label(),
				Message: fmt.Sprintf("%s differs from %s: found %q, want %q", w.label(), f.Marker, g.sql, w.sql)})
		}
		delete(got, w.label())
	}
	var unknown []string
	for label, o := range got {
		if o.typ == "index" && slices.Contains(f.Retired, o.name) {
			v.Notes = append(v.Notes, fmt.Sprintf("localcloud's own %s of an earlier version is still there; localcloud drops it on its next read-write open", label))
			continue
		}
		unknown = append(unknown, label)
	}
	sort.Strings(unknown)
	for _, label := range unknown {
		v.Problems = append(v.Problems, Problem{Kind: ProblemSchemaUnknown, Object: label,
			Message: fmt.Sprintf("%s is not part of %s: %q", label, f.Marker, got[label].sql)})
	}
	return nil
}

// readSchema returns the schema objects of a database by "type name",
// without SQLite's internal ones (sqlite_sequence, sqlite_autoindex_*,
// sqlite_stat*), which follow from the DDL.
func readSchema(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) (map[string]schemaObject, error) {
	rows, err := q.QueryContext(ctx, `SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite\_%' ESCAPE '\'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]schemaObject{}
	for rows.Next() {
		var o schemaObject
		var text sql.NullString
		if err := rows.Scan(&o.typ, &o.name, &o.table, &text); err != nil {
			return nil, err
		}
		o.raw = text.String
		o.sql = NormalizeSQL(text.String)
		out[o.label()] = o
	}
	return out, rows.Err()
}

var expected = struct {
	sync.Mutex
	m map[string][]schemaObject
}{m: map[string][]schemaObject{}}

// expectedSchema runs the format's DDL on a private in-memory database and
// reads its sqlite_master back: SQLite applies the same rewriting it
// applied to the store's (drops IF NOT EXISTS, upper-cases CREATE ...), so
// the two compare after NormalizeSQL.
func expectedSchema(ctx context.Context, f Format) ([]schemaObject, error) {
	key := f.Marker + "\x00" + f.Schema + "\x00" + f.Extra
	expected.Lock()
	defer expected.Unlock()
	if s, ok := expected.m[key]; ok {
		return s, nil
	}
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // every connection to :memory: is its own database
	if _, err := db.ExecContext(ctx, MetaDDL+"\n"+f.Schema); err != nil {
		return nil, err
	}
	spec, err := readSchema(ctx, db)
	if err != nil {
		return nil, err
	}
	if f.Extra != "" {
		if _, err := db.ExecContext(ctx, f.Extra); err != nil {
			return nil, err
		}
	}
	all, err := readSchema(ctx, db)
	if err != nil {
		return nil, err
	}
	var out []schemaObject
	for label, o := range all {
		_, inSpec := spec[label]
		o.extra = !inSpec
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].label() < out[j].label() })
	expected.m[key] = out
	return out, nil
}

// OwnPrefix starts the names of localcloud's own schema objects.
const OwnPrefix = "lc_"

// foreignObjects returns the objects of got, a store's schema, that a store
// of the format must not hold, sorted by label. Opening a store refuses
// them: no statement of localcloud may run beside code it did not write.
//
//   - Every trigger and every view: neither format has one, and a trigger
//     runs inside localcloud's own writes (an ack that inserts the message
//     back, a delete that resurrects a key, a put copied into meta).
//   - Every index the format (spec and localcloud's Extra) does not define
//     nor lists as Retired, whatever its name: an index constrains writes (a UNIQUE index refuses
//     sends, an expression index fails them).
//   - Every table the format does not define, unless its name starts with
//     OwnPrefix: that is localcloud's namespace, and a table of it that this
//     version does not know (a newer version's) is inert, as nothing reads or
//     writes it.
//
// An object of the format whose SQL differs (drift) is not refused here:
// another implementation may spell the DDL differently; Verify reports it.
func foreignObjects(want []schemaObject, retired []string, got map[string]schemaObject) []schemaObject {
	known := map[string]bool{}
	for _, w := range want {
		known[w.label()] = true
	}
	for _, name := range retired {
		known["index "+name] = true
	}
	var out []schemaObject
	for label, o := range got {
		switch {
		case known[label] && (o.typ == "table" || o.typ == "index"):
		case o.typ == "table" && strings.HasPrefix(o.name, OwnPrefix):
		default:
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].label() < out[j].label() })
	return out
}

// checkObjects fails with BINDING_SETUP_FAILED naming every object of the
// database behind q that foreignObjects refuses. It only reads sqlite_master.
func checkObjects(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, path string, f Format) error {
	_, err := checkSchema(ctx, q, path, f)
	return err
}

// checkSchema is checkObjects that also reports whether every object the
// format's DDL creates (Schema and Extra) is there already, by type and
// name: then running the DDL would change nothing.
func checkSchema(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, path string, f Format) (complete bool, err error) {
	want, err := expectedSchema(ctx, f)
	if err != nil {
		return false, fmt.Errorf("build the expected schema of %s: %w", f.Marker, err)
	}
	got, err := readSchema(ctx, q)
	if err != nil {
		return false, bindings.Wrap(bindings.CodeBindingSetupFailed, err, "open store %q: read the schema", path)
	}
	bad := foreignObjects(want, f.Retired, got)
	if len(bad) == 0 {
		complete = true
		for _, w := range want {
			if _, ok := got[w.label()]; !ok {
				complete = false
			}
		}
		return complete, nil
	}
	var names, drops []string
	for _, o := range bad {
		names = append(names, fmt.Sprintf("%s %q (%s)", o.typ, o.name, clip(strings.Join(strings.Fields(o.raw), " "), 120)))
		drops = append(drops, fmt.Sprintf("DROP %s %q;", strings.ToUpper(o.typ), o.name))
	}
	return false, bindings.Errorf(bindings.CodeBindingSetupFailed,
		"open store %q: the database holds %s, not part of %s nor localcloud's own; a trigger, view, index or table of another program would run inside or constrain localcloud's writes, so the store was refused and its files were left untouched: if you trust the file, remove it (%s), else restore a backup",
		path, strings.Join(names, ", "), f.Marker, strings.Join(drops, " "))
}

// clip shortens s to at most n bytes, marking a cut with "...".
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// integrityLines caps how many integrity_check lines are reported.
const integrityLines = 20

func verifyIntegrity(ctx context.Context, conn *sql.Conn, v *Verification) error {
	rows, err := conn.QueryContext(ctx, fmt.Sprintf("PRAGMA integrity_check(%d)", integrityLines))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return err
		}
		if line != "ok" {
			v.Problems = append(v.Problems, Problem{Kind: ProblemIntegrity, Message: "integrity_check: " + line})
		}
	}
	return rows.Err()
}

// NormalizeSQL makes schema SQL comparable: comments removed, runs of
// whitespace collapsed to one space and dropped next to ( ) , ;, a
// trailing ; removed, and everything outside quotes upper-cased (SQL
// keywords and identifiers are case-insensitive; string literals and
// quoted identifiers are kept as written).
func NormalizeSQL(s string) string {
	var b strings.Builder
	space := false
	// emitSpace writes a pending space, except at the start and after
	// punctuation.
	emitSpace := func() {
		if space && b.Len() > 0 && !strings.ContainsRune("(),;", rune(b.String()[b.Len()-1])) {
			b.WriteByte(' ')
		}
		space = false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			for i < len(s) && s[i] != '\n' {
				i++
			}
			space = true
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				i = len(s)
			} else {
				i += 2 + end + 1
			}
			space = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			space = true
		case c == '(' || c == ')' || c == ',' || c == ';':
			space = false
			b.WriteByte(c)
		case c == '\'' || c == '"' || c == '`' || c == '[':
			emitSpace()
			closer := c
			if c == '[' {
				closer = ']'
			}
			j := i + 1
			for j < len(s) {
				if s[j] == closer {
					if closer != ']' && j+1 < len(s) && s[j+1] == closer { // doubled quote
						j += 2
						continue
					}
					break
				}
				j++
			}
			if j >= len(s) {
				j = len(s) - 1
			}
			b.WriteString(s[i : j+1])
			i = j
		default:
			emitSpace()
			if c >= 'a' && c <= 'z' {
				c -= 'a' - 'A'
			}
			b.WriteByte(c)
		}
	}
	return strings.TrimSuffix(b.String(), ";")
}
