package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/testutil"
)

// These tests put damaged or foreign store files where a stack's stores
// are and run the real localcloud binary on them: up must refuse to start
// and check must report, each naming the path and the problem, and neither
// may change a byte of any file. Then a small tmpfs runs out of space under
// the CLI's store commands and under up.

// hostileStore is one damaged store of the hostile stack.
type hostileStore struct {
	name, typ string
	damage    func(t *testing.T, dir, file string)
	// upSays and checkSays are what up's error and check's line for the
	// binding must contain besides the binding's path.
	upSays, checkSays []string
}

// storeFile returns the store directory and database file of binding name
// of type typ in s.
func (s stack) storeFile(typ, name string) (dir, file string) {
	dir = filepath.Join(s.dataDir(), typ, name)
	if typ == "kv" {
		return dir, filepath.Join(dir, sqlitekv.FileName)
	}
	return dir, filepath.Join(dir, sqlitequeue.FileName)
}

// makeStore creates the store of type typ in dir with n records and closes
// it.
func makeStore(t *testing.T, typ, dir string, n int) {
	t.Helper()
	ctx := context.Background()
	if typ == "kv" {
		s, err := kv.Open(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := s.Put(ctx, fmt.Sprintf("k%04d", i), bytes.Repeat([]byte("v"), 200)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return
	}
	q, err := queue.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := q.Send(ctx, queue.Text(fmt.Sprintf("m%04d-%s", i, strings.Repeat("x", 200)))); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

// liveWAL returns the -wal of a SQLite database while a connection has it
// open: of another program's database (a users table) when other is
// false, else of another localcloud queue store. SQLite takes no lock on
// the -wal file, so reading it with a descriptor of our own is safe.
func liveWAL(t *testing.T, other bool) []byte {
	t.Helper()
	dir := t.TempDir()
	var path string
	var closeFn func() error
	if other {
		q, err := queue.Open(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			if err := q.Send(context.Background(), queue.Text(fmt.Sprintf("other-%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		path, closeFn = q.Path(), q.Close
	} else {
		path = filepath.Join(dir, "users.db")
		db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String())
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		for _, s := range []string{"PRAGMA journal_mode=WAL", "PRAGMA wal_autocheckpoint=0",
			"CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)", "INSERT INTO users (email) VALUES ('a@example.com')"} {
			if _, err := db.Exec(s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		closeFn = db.Close
	}
	b, err := os.ReadFile(path + "-wal")
	if err != nil || len(b) == 0 {
		t.Fatalf("-wal of the open database: %d bytes, %v", len(b), err)
	}
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	return b
}

func hostileStores() []hostileStore {
	return []hostileStore{{
		name: "cutmid", typ: "queue",
		damage: func(t *testing.T, dir, file string) {
			fi, err := os.Stat(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(file, fi.Size()-1500); err != nil {
				t.Fatal(err)
			}
		},
		upSays:    []string{"cut mid-page"},
		checkSays: []string{"file: ", "cut mid-page"},
	}, {
		name: "cutpage", typ: "queue",
		damage: func(t *testing.T, dir, file string) {
			fi, err := os.Stat(file)
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			keep := fi.Size() / 4096 / 2 * 4096
			if !bytes.Contains(b[:keep], []byte("format"+sqlitequeue.Marker)) {
				t.Fatalf("the cut to %d bytes would lose the marker", keep)
			}
			if err := os.Truncate(file, keep); err != nil {
				t.Fatal(err)
			}
		},
		upSays:    []string{"is truncated", "its header says"},
		checkSays: []string{"file: ", "is truncated"},
	}, {
		name: "zeroed", typ: "kv",
		damage: func(t *testing.T, dir, file string) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			copy(b, make([]byte, 100))
			if err := os.WriteFile(file, b, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		upSays:    []string{"header zeroed"},
		checkSays: []string{"open: ", "header zeroed"},
	}, {
		name: "progwal", typ: "queue",
		damage: func(t *testing.T, dir, file string) {
			if err := os.WriteFile(file+"-wal", liveWAL(t, false), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		upSays:    []string{"-wal", "cannot be shown to belong"},
		checkSays: []string{"wal: ", "cannot be shown to belong", "verified without it"},
	}, {
		name: "storewal", typ: "queue",
		damage: func(t *testing.T, dir, file string) {
			if err := os.WriteFile(file+"-wal", liveWAL(t, true), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		upSays:    []string{"-wal", "cannot be shown to belong"},
		checkSays: []string{"wal: ", "cannot be shown to belong"},
	}, {
		name: "marker", typ: "kv",
		damage: func(t *testing.T, dir, file string) {
			db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: file}).String())
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec("UPDATE meta SET value = 'localkv.v2' WHERE key = 'format'"); err != nil {
				t.Fatal(err)
			}
		},
		upSays:    []string{`found format "localkv.v2"`},
		checkSays: []string{"marker: ", `"localkv.v2"`},
	}, {
		name: "worldwritable", typ: "queue",
		damage: func(t *testing.T, dir, file string) {
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		},
		upSays:    []string{"mode 0777", "chmod 700 "},
		checkSays: []string{"mode: store directory", "0777"},
	}, {
		name: "ackloop", typ: "queue",
		damage: func(t *testing.T, dir, file string) {
			tamperSQL(t, file, trojanAckLoop)
		},
		upSays:    []string{`trigger "ackloop"`, "DROP TRIGGER"},
		checkSays: []string{"schema-unknown: trigger ackloop is not part of localqueue.v1"},
	}, {
		name: "undelete", typ: "kv",
		damage: func(t *testing.T, dir, file string) {
			tamperSQL(t, file, trojanUndelete)
		},
		upSays:    []string{`trigger "undelete"`},
		checkSays: []string{"schema-unknown: trigger undelete is not part of localkv.v1"},
	}, {
		name: "leak", typ: "kv",
		damage: func(t *testing.T, dir, file string) {
			tamperSQL(t, file, trojanLeak)
		},
		upSays:    []string{`trigger "leak"`},
		checkSays: []string{"schema-unknown: trigger leak is not part of localkv.v1"},
	}, {
		name: "view", typ: "queue",
		damage: func(t *testing.T, dir, file string) {
			tamperSQL(t, file, "CREATE VIEW due AS SELECT * FROM messages")
		},
		upSays:    []string{`view "due"`, "DROP VIEW"},
		checkSays: []string{"schema-unknown: view due is not part of localqueue.v1"},
	}}
}

// Triggers a hostile or careless program may leave in a store file: acks
// that insert the message back, deletes that resurrect the key, puts
// copied into meta.
const (
	trojanAckLoop = `CREATE TRIGGER ackloop AFTER DELETE ON messages BEGIN
INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES (old.payload_type, old.payload_data, old.enqueued_at, 0, 0); END`
	trojanUndelete = `CREATE TRIGGER undelete AFTER DELETE ON kv BEGIN
INSERT INTO kv (key, value, expires_at) VALUES (old.key, old.value, old.expires_at); END`
	trojanLeak = `CREATE TRIGGER leak AFTER INSERT ON kv BEGIN
INSERT OR REPLACE INTO meta (key, value) VALUES ('leak-' || new.key, CAST(new.value AS TEXT)); END`
)

// tamperSQL runs stmts on the database file with a connection of its own,
// as another program would, and closes it.
func tamperSQL(t *testing.T, file string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: file}).String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, st := range stmts {
		if _, err := db.Exec(st); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
}

// wantUntouched fails if a file of before changed or went, or a file
// appeared other than the empty -wal and the -shm a read-only SQLite read
// of a store without a -wal creates (documented by check).
func wantUntouched(t *testing.T, name, dir string, before map[string][32]byte, after string) {
	t.Helper()
	now := testutil.StoreHashes(t, dir)
	_, planted := before[filepath.Base(dir)+"-wal"]
	for n, h := range now {
		b, ok := before[n]
		switch {
		case ok && b != h:
			t.Errorf("%s: %s: %s changed", after, name, n)
		case ok:
		case !planted && strings.HasSuffix(n, "-shm"):
		case !planted && strings.HasSuffix(n, "-wal") && h == hashOf(nil):
		default:
			t.Errorf("%s: %s: %s appeared", after, name, n)
		}
	}
	for n := range before {
		if _, ok := now[n]; !ok {
			t.Errorf("%s: %s: %s disappeared", after, name, n)
		}
	}
}

// TestHostileStoresUpAndCheck: up refuses to start on a stack whose stores
// are damaged or foreign and names every one; check reports every one; no
// file of any store changes.
func TestHostileStoresUpAndCheck(t *testing.T) {
	t.Parallel()
	cases := hostileStores()
	var bs strings.Builder
	for _, c := range cases {
		fmt.Fprintf(&bs, "  %s:\n    type: %s\n", c.name, c.typ)
	}
	s := newStack(t, bs.String())
	before := map[string]map[string][32]byte{}
	for _, c := range cases {
		dir, file := s.storeFile(c.typ, c.name)
		makeStore(t, c.typ, dir, 300)
		c.damage(t, dir, file)
		if c.name == "worldwritable" {
			t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
		}
		before[c.name] = testutil.StoreHashes(t, dir)
	}
	untouched := func(after string) {
		t.Helper()
		for _, c := range cases {
			dir, _ := s.storeFile(c.typ, c.name)
			wantUntouched(t, c.name, dir, before[c.name], after)
		}
	}

	p := start(t, "up", "-f", s.file)
	if code := p.waitExit(readyTimeout); code == 0 {
		t.Fatalf("up started on the hostile stores:\n%s", p.stderr())
	}
	upErr := p.stderr()
	t.Logf("up:\n%s", upErr)
	for _, c := range cases {
		dir, file := s.storeFile(c.typ, c.name)
		found := false
		for _, l := range strings.Split(upErr, "\n") {
			if strings.Contains(l, "binding "+c.name+" ") && containsAll(l, append([]string{"BINDING_SETUP_FAILED", file}, c.upSays...)) {
				found = true
			}
		}
		if !found {
			t.Errorf("up's error has no line for %s naming %s and %q", c.name, dir, c.upSays)
		}
	}
	if exists(filepath.Join(s.dataDir(), "runtime.json")) {
		t.Errorf("up left a runtime.json after refusing to start")
	}
	untouched("up")

	code, stdout, stderr := lc(t, nil, "check", "-f", s.file)
	t.Logf("check:\n%s%s", stdout, stderr)
	if code != 1 {
		t.Errorf("check exit %d; want 1", code)
	}
	for _, c := range cases {
		dir, _ := s.storeFile(c.typ, c.name)
		found := false
		for _, l := range strings.Split(stdout, "\n") {
			says := c.checkSays
			// check's marker and schema lines name the format, not the file.
			if c.name != "marker" && !strings.HasPrefix(c.checkSays[0], "schema-") {
				says = append([]string{dir}, says...)
			}
			if strings.HasPrefix(l, c.name+": ") && containsAll(l, says) {
				found = true
			}
		}
		if !found {
			t.Errorf("check has no line for %s naming %s and %q", c.name, dir, c.checkSays)
		}
	}
	untouched("check")
}

// TestGroupReadableStoreUp: a database file that group and others may read
// but not write is no danger to the data: by the one file-mode policy, up
// starts and warns, its health check and check agree that it is no problem
// (check notes it), and the data is served.
func TestGroupReadableStoreUp(t *testing.T) {
	t.Parallel()
	s := newStack(t, "  carts:\n    type: kv\n")
	dir, file := s.storeFile("kv", "carts")
	makeStore(t, "kv", dir, 3)
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	up, _ := s.up(t)
	up.waitLine(0, eventTimeout, "level=WARN", "binding=carts", "mode 0644", "chmod 600 "+file)
	if h := s.runtime(t).health("carts"); h != "ok" {
		t.Errorf("carts health %q; want ok: open only warns about mode 0644", h)
	}
	if got := lcOK(t, nil, "kv", "get", "carts", "k0002", "-f", s.file); got != strings.Repeat("v", 200) {
		t.Errorf("kv get = %q", got)
	}
	code, stdout, _ := lc(t, nil, "check", "carts", "-f", s.file)
	if code != 0 || !strings.Contains(stdout, "carts: note: "+file+" has mode 0644: group or others can read it") {
		t.Errorf("check: exit %d\n%s", code, stdout)
	}
	up.signal(syscall.SIGTERM)
	if code := up.waitExit(stopLimit); code != 0 {
		t.Errorf("up exit %d", code)
	}
}

// diskFullSays fails unless a CLI error says LOCAL_FILESYSTEM_ERROR, that
// the disk is full and names file.
func diskFullSays(t *testing.T, what, stderr, file string) {
	t.Helper()
	if !containsAll(stderr, []string{"LOCAL_FILESYSTEM_ERROR", "disk is full", file}) {
		t.Errorf("%s does not say LOCAL_FILESYSTEM_ERROR, that the disk is full and %s:\n%s", what, file, stderr)
	}
}

// TestDiskFullCLI runs the CLI on stores on a small tmpfs: once the disk is
// full, localcloud queue send and kv put fail with LOCAL_FILESYSTEM_ERROR
// naming the store and saying the disk is full (while up holds the stores,
// at the write; without up, already at the open, which needs room for the
// -shm index); up cannot provision a new binding there and says so; once
// space is freed up starts and provisions it, and every message sent
// before is there in order.
func TestDiskFullCLI(t *testing.T) {
	t.Parallel()
	s := newStack(t, "  orders:\n    type: queue\n    path: disk/orders\n  carts:\n    type: kv\n    path: disk/carts\n")
	disk := filepath.Join(s.dataDir(), "disk")
	testutil.MountSmallDisk(t, disk, 2<<20)
	ordersFile := filepath.Join(disk, "orders", sqlitequeue.FileName)
	cartsFile := filepath.Join(disk, "carts", sqlitekv.FileName)
	up, _ := s.up(t)
	lcOK(t, nil, "queue", "send", "orders", "before-0", "-f", s.file)
	lcOK(t, nil, "kv", "put", "carts", "k", "v", "-f", s.file)

	filler := filepath.Join(disk, "filler")
	n := testutil.FillDisk(t, filler, 64<<20)
	if n >= 64<<20 {
		t.Fatal("wrote 64 MiB to the small disk")
	}
	sent := []string{"before-0"}
	// What the WAL still has room for goes in; then sends fail.
	var failed string
	for i := 1; i < 500 && failed == ""; i++ {
		body := fmt.Sprintf("before-%d-%s", i, strings.Repeat("x", 2000))
		code, _, stderr := lc(t, nil, "queue", "send", "orders", body, "-f", s.file)
		if code == 0 {
			sent = append(sent, body)
			continue
		}
		failed = stderr
	}
	t.Logf("up running; filler %d bytes; %d CLI sends went in, then:\n%s", n, len(sent), failed)
	diskFullSays(t, "queue send on the full disk", failed, ordersFile)
	code, _, stderr := lc(t, nil, "kv", "put", "carts", "k2", strings.Repeat("v", 8000), "-f", s.file)
	t.Logf("kv put on the full disk: exit %d\n%s", code, stderr)
	if code == 0 {
		t.Errorf("kv put on the full disk succeeded")
	}
	diskFullSays(t, "kv put on the full disk", stderr, cartsFile)
	up.signal(syscall.SIGTERM)
	code = up.waitExit(stopLimit)
	t.Logf("up stopped on the full disk: exit %d", code)

	code, _, stderr = lc(t, nil, "queue", "send", "orders", "without-up", "-f", s.file)
	t.Logf("queue send without up on the full disk: exit %d\n%s", code, stderr)
	if code == 0 {
		sent = append(sent, "without-up")
	} else {
		diskFullSays(t, "queue send without up on the full disk", stderr, ordersFile)
	}

	// up with a new binding on the full disk cannot create its store.
	s.write(t, "  orders:\n    type: queue\n    path: disk/orders\n  carts:\n    type: kv\n    path: disk/carts\n  invoices:\n    type: queue\n    path: disk/invoices\n")
	invoicesFile := filepath.Join(disk, "invoices", sqlitequeue.FileName)
	p := start(t, "up", "-f", s.file)
	if code := p.waitExit(readyTimeout); code == 0 {
		t.Fatalf("up started with a new binding on a full disk:\n%s", p.stderr())
	}
	t.Logf("up on the full disk:\n%s", p.stderr())
	line := ""
	for _, l := range strings.Split(p.stderr(), "\n") {
		if strings.Contains(l, "binding invoices ") {
			line = l
		}
	}
	diskFullSays(t, "up's error for the new binding", line, invoicesFile)
	if exists(filepath.Join(s.dataDir(), "runtime.json")) {
		t.Errorf("up left a runtime.json after failing to start")
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	up, _ = s.up(t)
	for _, name := range []string{"orders", "carts", "invoices"} {
		if h := s.runtime(t).health(name); h != "ok" {
			t.Errorf("%s health after freeing space: %q", name, h)
		}
	}
	lcOK(t, nil, "queue", "send", "invoices", "first", "-f", s.file)
	var peek queueMsgsOut
	decode(t, "queue peek", lcOK(t, nil, "queue", "peek", "orders", "--limit", "1000", "--json", "-f", s.file), &peek)
	var got []string
	for _, m := range peek.Messages {
		got = append(got, m.Payload)
	}
	if strings.Join(got, "\n") != strings.Join(sent, "\n") {
		t.Errorf("after the full disk the queue holds %d messages; want the %d sent, in order", len(got), len(sent))
	}
	if v := lcOK(t, nil, "kv", "get", "carts", "k", "-f", s.file); v != "v" {
		t.Errorf("kv get k = %q; want v", v)
	}
	if code, _, _ := lc(t, nil, "kv", "get", "carts", "k2", "-f", s.file); code != 1 {
		t.Errorf("kv get of the put that failed: exit %d; want 1 (absent)", code)
	}
	for _, name := range []string{"orders", "carts", "invoices"} {
		if out := lcOK(t, nil, "check", name, "-f", s.file); !strings.HasPrefix(out, name+": ok") {
			t.Errorf("check %s: %s", name, out)
		}
	}
	up.signal(syscall.SIGTERM)
	if code := up.waitExit(stopLimit); code != 0 {
		t.Errorf("up exit %d", code)
	}
}

// TestTrojanStoresCLI: every CLI store command refuses a store holding a
// trigger with BINDING_SETUP_FAILED naming the trigger, and changes no
// byte of it; backup refuses to copy one and restore to install one.
func TestTrojanStoresCLI(t *testing.T) {
	t.Parallel()
	s := newStack(t, "  jobs:\n    type: queue\n  carts:\n    type: kv\n")
	qdir, qfile := s.storeFile("queue", "jobs")
	kdir, kfile := s.storeFile("kv", "carts")
	makeStore(t, "queue", qdir, 3)
	makeStore(t, "kv", kdir, 3)
	tamperSQL(t, qfile, trojanAckLoop)
	tamperSQL(t, kfile, trojanUndelete, trojanLeak)
	qbefore, kbefore := testutil.StoreHashes(t, qdir), testutil.StoreHashes(t, kdir)

	for _, c := range []struct {
		args []string
		says []string
	}{
		{[]string{"queue", "send", "jobs", "x"}, []string{qfile, `trigger "ackloop"`}},
		{[]string{"queue", "receive", "jobs"}, []string{qfile, `trigger "ackloop"`}},
		{[]string{"queue", "ack", "jobs", "1:00000000-0000-4000-8000-000000000000"}, []string{qfile, `trigger "ackloop"`}},
		{[]string{"queue", "peek", "jobs"}, []string{qfile, `trigger "ackloop"`}},
		{[]string{"queue", "stats", "jobs"}, []string{qfile, `trigger "ackloop"`}},
		{[]string{"queue", "purge", "jobs", "--yes"}, []string{qfile, `trigger "ackloop"`}},
		{[]string{"kv", "get", "carts", "k0001"}, []string{kfile, `trigger "leak"`, `trigger "undelete"`}},
		{[]string{"kv", "put", "carts", "k", "v"}, []string{kfile, `trigger "leak"`}},
		{[]string{"kv", "delete", "carts", "k0001"}, []string{kfile, `trigger "undelete"`}},
		{[]string{"kv", "scan", "carts", "k"}, []string{kfile, `trigger "undelete"`}},
		{[]string{"backup", "jobs", filepath.Join(s.dir, "jobs.bak")}, []string{"schema-unknown: trigger ackloop"}},
	} {
		code, stdout, stderr := lc(t, nil, append(c.args, "-f", s.file)...)
		what := strings.Join(c.args, " ")
		if code != 1 || !strings.HasPrefix(stderr, "Error: ") || !containsAll(stderr, c.says) {
			t.Errorf("localcloud %s on a store with a trigger: exit %d; want 1 and an error saying %q\nstdout: %s\nstderr: %s",
				what, code, c.says, stdout, stderr)
		}
		wantUntouched(t, "jobs", qdir, qbefore, what)
		wantUntouched(t, "carts", kdir, kbefore, what)
	}
	if exists(filepath.Join(s.dir, "jobs.bak")) {
		t.Error("backup of a store with a trigger left a file")
	}

	// restore: a backup file with a trigger is not installed.
	good := filepath.Join(t.TempDir(), "good")
	makeStore(t, "queue", good, 2)
	gfile := filepath.Join(good, sqlitequeue.FileName)
	s2 := newStack(t, "  jobs:\n    type: queue\n")
	_, live := s2.storeFile("queue", "jobs")
	makeStore(t, "queue", filepath.Dir(live), 1)
	liveBefore := testutil.StoreHashes(t, filepath.Dir(live))
	tamperSQL(t, gfile, trojanAckLoop)
	gbefore := testutil.StoreHashes(t, good)
	code, stdout, stderr := lc(t, nil, "restore", "jobs", gfile, "-f", s2.file)
	if code != 1 || !containsAll(stderr, []string{"schema-unknown: trigger ackloop"}) {
		t.Errorf("restore of a file with a trigger: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	wantUntouched(t, "restore source", good, gbefore, "restore")
	wantUntouched(t, "restored store", filepath.Dir(live), liveBefore, "restore")
}
