package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/engine/sqlitetools"
)

// envMigrateKills sets how many times TestMigrateKilledAndRerun SIGKILLs
// each migrate before letting one finish (default 2).
const envMigrateKills = "LOCALCLOUD_MIGRATE_KILLS"

// queued is a message as the test reads it from the SQLite file, by
// payload (every payload of the test is unique).
type queued struct {
	attempts             int
	delayed              bool
	lastError            string
	originStore          string
	originID, originAtts int64
	attrs                string // lc_attributes' JSON, "" for none
}

// readQueue reads every message of the queue store in dir straight from
// its file, with its last error and origin, independent of the engine's
// code.
func readQueue(t *testing.T, dir string) map[string]queued {
	t.Helper()
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: filepath.Join(dir, sqlitequeue.FileName), RawQuery: "mode=ro"}).String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT m.payload_data, m.attempt, m.visible_at > ?1 AND m.attempt = 0,
COALESCE((SELECT e.error FROM lc_errors e WHERE e.message_id = m.id), ''),
COALESCE(a.origin_store, ''), COALESCE(a.origin_id, 0), COALESCE(a.attempts, 0),
COALESCE((SELECT x.attributes FROM lc_attributes x WHERE x.message_id = m.id), '')
FROM messages m LEFT JOIN lc_arrivals a ON a.message_id = m.id AND a.kind = 'dead-letter'`, time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]queued{}
	for rows.Next() {
		var p string
		var q queued
		if err := rows.Scan(&p, &q.attempts, &q.delayed, &q.lastError, &q.originStore, &q.originID, &q.originAtts, &q.attrs); err != nil {
			t.Fatal(err)
		}
		if _, dup := out[p]; dup {
			t.Errorf("message %q is in %s twice", p, dir)
		}
		out[p] = q
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

type kept struct {
	value   string
	expires int64 // unix ms, 0 for none
}

func readKV(t *testing.T, dir string) map[string]kept {
	t.Helper()
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: filepath.Join(dir, "localkv.sqlite"), RawQuery: "mode=ro"}).String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT key, value, COALESCE(expires_at, 0) FROM kv`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]kept{}
	for rows.Next() {
		var k string
		var v []byte
		var e int64
		if err := rows.Scan(&k, &v, &e); err != nil {
			t.Fatal(err)
		}
		out[k] = kept{string(v), e}
	}
	return out
}

// fillMigrateStores writes the stores of TestMigrateKilledAndRerun: 300
// dead letters in dlq (moved there by orders' policy after two failed
// deliveries, each with its origin and last error); 10,000 messages in
// orders: 500 delayed by an hour, 500 failed twice (attempts 2, a last
// error), 500 sent with dedup keys, the rest plain; 10,000 keys in carts,
// every tenth with a TTL of an hour.
func fillMigrateStores(t *testing.T, s stack) {
	ctx := context.Background()
	ordersDir, dlqDir := filepath.Join(s.dataDir(), "queue", "orders"), filepath.Join(s.dataDir(), "queue", "dlq")
	dlq, err := queue.Open(ctx, dlqDir)
	if err != nil {
		t.Fatal(err)
	}
	q, eq, err := sqlitetools.OpenQueue(ctx, ordersDir, queue.WithDeadLetter(2, dlqDir), queue.WithBindingName("orders"))
	if err != nil {
		t.Fatal(err)
	}
	send := func(prefix string, n int, opts ...queue.SendOption) {
		for i := 0; i < n; i += queue.MaxSendBatch {
			var ps []queue.Payload
			var keys []string
			var attrs []queue.Attributes // on every other message
			for j := i; j < min(n, i+queue.MaxSendBatch); j++ {
				ps = append(ps, queue.Text(prefix+strconv.Itoa(j)))
				keys = append(keys, "key-"+strconv.Itoa(j))
				var a queue.Attributes
				if j%2 == 0 {
					a = queue.Attributes{"n": {Type: "Number", String: strconv.Itoa(j)}, "b": {Type: "Binary.x", Binary: []byte(prefix)}}
				}
				attrs = append(attrs, a)
			}
			o := append(opts, queue.WithAttributes(attrs...))
			if prefix == "keyed-" {
				o = append(o, queue.WithDedupKeys(keys...))
			}
			if err := q.SendBatch(ctx, ps, o...); err != nil {
				t.Fatal(err)
			}
		}
	}
	// failTwice fails the first n due messages twice each (FIFO: the
	// same n both times).
	failTwice := func(n int) {
		for round := 1; round <= 2; round++ {
			var held []queue.Message
			for len(held) < n {
				ms, err := q.Receive(ctx, min(queue.MaxReceiveBatch, n-len(held)), queue.ReceiveVisibility(time.Minute))
				if err != nil || len(ms) == 0 {
					t.Fatalf("receive for failure %d: %d messages, %v", round, len(ms), err)
				}
				held = append(held, ms...)
			}
			for _, m := range held {
				if err := eq.NackFailed(ctx, m.ReceiptHandle, 0, "failure "+strconv.Itoa(round)+" of "+m.Payload.String()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	send("dead-", 300)
	failTwice(300)
	// Third receives move them, spent, up to a batch each.
	for i := 0; ; i++ {
		if ms, err := q.Receive(ctx, queue.MaxReceiveBatch); err != nil || len(ms) != 0 {
			t.Fatalf("receive past the dead letters: %d, %v", len(ms), err)
		}
		st, err := dlq.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.DeadLetters == 300 {
			break
		}
		if i > 300/queue.MaxReceiveBatch {
			t.Fatalf("dlq stats %+v after %d receives", st, i+1)
		}
	}
	send("failed-", 500)
	failTwice(500)
	send("keyed-", 500)
	send("plain-", 8500)
	send("delayed-", 500, queue.WithDelay(time.Hour))
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dlq.Close(); err != nil {
		t.Fatal(err)
	}
	carts, err := kv.Open(ctx, filepath.Join(s.dataDir(), "kv", "carts"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10000 {
		var opts []kv.PutOption
		if i%10 == 0 {
			opts = append(opts, kv.WithTTL(time.Hour))
		}
		if _, err := carts.Put(ctx, "k"+strconv.Itoa(i), []byte("value "+strconv.Itoa(i)), opts...); err != nil {
			t.Fatal(err)
		}
	}
	if err := carts.Close(); err != nil {
		t.Fatal(err)
	}
}

// migrateWithKills runs localcloud migrate NAME --to ENGINE, SIGKILLs it
// kills times at random points, then lets it finish.
func migrateWithKills(t *testing.T, s stack, name, to string, kills int, rng *rand.Rand) string {
	t.Helper()
	args := []string{"migrate", name, "--to", to, "-f", s.file, "--lease", "2s", "--wait", "1m", "--batch", "200"}
	for k := 0; k < kills; k++ {
		p := start(t, args...)
		after := time.Duration(20+rng.IntN(980)) * time.Millisecond
		select {
		case <-p.done:
			t.Logf("migrate %s --to %s finished before the kill at %s", name, to, after)
		case <-time.After(after):
			p.signal(syscall.SIGKILL)
			p.waitExit(stopLimit)
			t.Logf("migrate %s --to %s killed after %s: %s", name, to, after, strings.TrimSpace(p.stderr()))
		}
	}
	began := time.Now()
	p := start(t, args...)
	code := p.waitExit(3 * time.Minute)
	out, errOut := p.stdout.String(), p.stderr()
	if code != 0 {
		t.Fatalf("migrate %s --to %s after %d kills: exit %d\n%s%s", name, to, kills, code, out, errOut)
	}
	t.Logf("migrate %s --to %s, the run that finished (%s): %s", name, to, time.Since(began).Round(time.Millisecond), strings.TrimSpace(out))
	return out
}

// TestMigrateKilledAndRerun: localcloud migrate moves a queue of 10,000
// messages (delayed ones, ones with attempts 2 and a last error, ones
// sent with dedup keys), its dead-letter queue of 300 dead letters (with
// origins and last errors) and a KV store of 10,000 keys (every tenth with
// a TTL) from sqlite to jetstream and back, each migrate SIGKILLed at
// random points and run again; the stores end with every message and key
// exactly once, with what they carried. up refuses the stack in between
// until the engines in the file match where the data is.
func TestMigrateKilledAndRerun(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 20,300 messages and 20,000 keys")
	}
	t.Parallel()
	kills := 2
	if v := os.Getenv(envMigrateKills); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("%s=%q: want a count", envMigrateKills, v)
		}
		kills = n
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d kills per migrate", seed, kills)
	rng := rand.New(rand.NewPCG(seed, seed))
	stackOf := func(engine string) string {
		return fmt.Sprintf("  orders:\n    type: queue\n    engine: %[1]s\n    maxAttempts: 2\n    deadLetter: dlq\n  dlq:\n    type: queue\n    engine: %[1]s\n  carts:\n    type: kv\n    engine: %[1]s\n", engine)
	}
	s := newStack(t, stackOf("sqlite"))
	fillMigrateStores(t, s)
	ordersDir, dlqDir, cartsDir := filepath.Join(s.dataDir(), "queue", "orders"), filepath.Join(s.dataDir(), "queue", "dlq"), filepath.Join(s.dataDir(), "kv", "carts")
	wantOrders, wantDLQ, wantKV := readQueue(t, ordersDir), readQueue(t, dlqDir), readKV(t, cartsDir)
	if len(wantOrders) != 10000 || len(wantDLQ) != 300 || len(wantKV) != 10000 {
		t.Fatalf("filled %d messages, %d dead letters, %d keys", len(wantOrders), len(wantDLQ), len(wantKV))
	}
	withAttrs := 0
	for _, m := range wantDLQ {
		if m.attrs != "" {
			withAttrs++
		}
	}
	if withAttrs != 150 {
		t.Fatalf("%d dead letters carry attributes, want 150 (every other one)", withAttrs)
	}

	for _, name := range []string{"orders", "dlq", "carts"} {
		migrateWithKills(t, s, name, "jetstream", kills, rng)
	}
	if n := len(readQueue(t, ordersDir)) + len(readQueue(t, dlqDir)) + len(readKV(t, cartsDir)); n != 0 {
		t.Fatalf("the sqlite stores still hold %d messages and keys after the move to jetstream", n)
	}
	// up with the file still on sqlite: refused, the data is in the streams.
	up := start(t, "up", "-f", s.file)
	if code := up.waitExit(readyTimeout); code == 0 || !strings.Contains(up.stderr(), "localcloud migrate orders --to sqlite") {
		t.Fatalf("up on sqlite with the data in jetstream: exit %d\n%s", code, up.stderr())
	}

	s.write(t, stackOf("jetstream"))
	for _, name := range []string{"orders", "dlq", "carts"} {
		migrateWithKills(t, s, name, "sqlite", kills, rng)
	}
	s.write(t, stackOf("sqlite"))

	gotOrders, gotDLQ, gotKV := readQueue(t, ordersDir), readQueue(t, dlqDir), readKV(t, cartsDir)
	compareQueue(t, "orders", wantOrders, gotOrders, kills)
	compareQueue(t, "dlq", wantDLQ, gotDLQ, kills)
	if len(gotKV) != len(wantKV) {
		t.Errorf("carts holds %d keys, want %d", len(gotKV), len(wantKV))
	}
	for k, w := range wantKV {
		g, ok := gotKV[k]
		switch {
		case !ok:
			t.Errorf("carts lost key %s", k)
		case g.value != w.value:
			t.Errorf("carts key %s = %q, want %q", k, g.value, w.value)
		case (g.expires == 0) != (w.expires == 0) || g.expires-w.expires > 2000 || w.expires-g.expires > 2000:
			t.Errorf("carts key %s expires at %d, want %d", k, g.expires, w.expires)
		}
	}

	// The dedup keys came along: a send of one is still a duplicate.
	p, _ := s.up(t)
	code, out, errOut := runCLI(t, "queue", "send", "orders", "again", "--dedup-key", "key-7", "-f", s.file)
	if code != 0 || !strings.Contains(out+errOut, "nothing added") {
		t.Errorf("a send of dedup key key-7 after the round trip: exit %d %s%s", code, out, errOut)
	}
	p.signal(syscall.SIGTERM)
	if code := p.waitExit(stopLimit); code != 0 {
		t.Fatalf("up exit %d", code)
	}
}

// compareQueue checks that got holds exactly the messages of want, each
// with its last error, delay and origin. Attempts are exact, except that
// a kill during an export from jetstream adds one to the messages that
// run held (the server counted the delivery): at most kills more.
func compareQueue(t *testing.T, name string, want, got map[string]queued, kills int) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s holds %d messages, want %d", name, len(got), len(want))
	}
	more := 0
	for _, p := range slices.Sorted(maps.Keys(want)) {
		w := want[p]
		g, ok := got[p]
		if !ok {
			t.Errorf("%s lost message %q", name, p)
			continue
		}
		if g.attempts != w.attempts {
			more++
		}
		if g.attempts < w.attempts || g.attempts > w.attempts+kills {
			t.Errorf("%s message %q has %d attempts, want %d", name, p, g.attempts, w.attempts)
		}
		g.attempts = w.attempts
		if g != w {
			t.Errorf("%s message %q = %+v, want %+v", name, p, g, w)
		}
	}
	if more > 0 {
		t.Logf("%s: %d messages have more attempts than before (held by a killed export from jetstream)", name, more)
	}
}

// TestMigrateLeasedMessages: a message leased to a consumer is not moved:
// migrate moves the rest and refuses, naming how many and until when; with
// --wait it waits for the lease and moves it too. The receipt of a message
// left in the source still acks it there.
func TestMigrateLeasedMessages(t *testing.T) {
	t.Parallel()
	s := newStack(t, "  jobs:\n    type: queue\n")
	for i := range 4 {
		mustCLI(t, "queue", "send", "jobs", fmt.Sprint("j", i), "-f", s.file)
	}
	receive := func(vis string) string {
		out := mustCLI(t, "queue", "receive", "jobs", "--visibility", vis, "--json", "-f", s.file)
		i := strings.Index(out, `"receipt": "`)
		if i < 0 {
			t.Fatalf("receive: %s", out)
		}
		r := out[i+len(`"receipt": "`):]
		return r[:strings.IndexByte(r, '"')]
	}
	long := receive("10m")
	code, out, errOut := runCLI(t, "migrate", "jobs", "--to", "jetstream", "-f", s.file)
	if code != 1 || !strings.Contains(errOut, "1 message leased to consumers") || !strings.Contains(errOut, "stayed in the source; refusing to move them") ||
		!strings.Contains(errOut, "--wait 10m") {
		t.Fatalf("migrate with a leased message: exit %d\n%s%s", code, out, errOut)
	}
	if n := len(readQueue(t, filepath.Join(s.dataDir(), "queue", "jobs"))); n != 1 {
		t.Fatalf("the sqlite store holds %d messages after the refusal, want the leased one", n)
	}
	// The consumer finishes it where it is.
	mustCLI(t, "queue", "ack", "jobs", long, "-f", s.file)
	mustCLI(t, "queue", "send", "jobs", "j4", "-f", s.file)
	receive("2s")
	code, out, errOut = runCLI(t, "migrate", "jobs", "--to", "jetstream", "--wait", "8s", "-f", s.file)
	if code != 0 || !strings.Contains(out, "moved 1 message of jobs") {
		t.Fatalf("migrate --wait past a 2s lease: exit %d\n%s%s", code, out, errOut)
	}
	if n := len(readQueue(t, filepath.Join(s.dataDir(), "queue", "jobs"))); n != 0 {
		t.Fatalf("the sqlite store holds %d messages after the move", n)
	}
}
