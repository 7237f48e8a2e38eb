package powercuttest

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/engine/sqlitetools"
	"github.com/localcloud/localcloud/internal/testutil"
	"github.com/localcloud/localcloud/internal/testutil/powercut"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	_ "modernc.org/sqlite"
)

// defaultRounds keeps `go test ./...` short; LOCALCLOUD_POWERCUT_ROUNDS=N
// runs N cuts per setting.
const defaultRounds = 2

// tally is what the cuts of one setting found.
type tally struct {
	cuts        int
	acked       int           // operations acknowledged: sends, acks, won put-if-absent, puts
	lost        int           // acknowledged and gone: sends, put-if-absent wins, puts
	resurrected int           // confirmed acks whose message is back
	both        int           // a message in the queue and its dead-letter queue
	neither     int           // a dead-letter message (acknowledged send) in neither, not a recent loss
	holes       int           // a lost message older than one that survived from the same producer
	corrupt     int           // stores failing check (marker, schema, integrity, modes)
	dups        int           // a message twice in one store, or two winners of one key
	maxLossAge  time.Duration // of an acknowledged send, ack, win or put lost (or an ack undone)
	maxLostCut  int           // most acknowledged operations undone by one cut
	torn        int
}

func (t *tally) add(o tally) {
	t.cuts += o.cuts
	t.acked += o.acked
	t.lost += o.lost
	t.resurrected += o.resurrected
	t.both += o.both
	t.neither += o.neither
	t.holes += o.holes
	t.corrupt += o.corrupt
	t.dups += o.dups
	t.maxLossAge = max(t.maxLossAge, o.maxLossAge)
	t.maxLostCut = max(t.maxLostCut, o.maxLostCut)
	t.torn += o.torn
}

func (t tally) row(name string) string {
	return fmt.Sprintf("| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %v | %d |", name, t.cuts, t.acked, t.lost, t.resurrected,
		t.both, t.neither, t.corrupt, t.holes, t.dups, t.maxLossAge.Round(time.Millisecond), t.maxLostCut)
}

func rounds(t *testing.T) int {
	s := os.Getenv("LOCALCLOUD_POWERCUT_ROUNDS")
	if s == "" {
		return defaultRounds
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("LOCALCLOUD_POWERCUT_ROUNDS: want a count of at least 1, got %q", s)
	}
	return n
}

// TestPowercut runs producers, Consume consumers, a receive/ack consumer, a
// redriver and put-if-absent writers as processes on stores inside a
// powercut mount, kills them all at a random moment, cuts the power and
// checks what is left against their ledgers.
func TestPowercut(t *testing.T) {
	if os.Getenv(envRole) != "" {
		t.Skip("in a helper process")
	}
	if why := powercut.Available(); why != "" {
		t.Skip(why)
	}
	n := rounds(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("LOCALCLOUD_POWERCUT_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("LOCALCLOUD_POWERCUT_SEED=%d", seed)
	for _, eng := range []string{"sqlite", "jetstream"} {
		for _, d := range []bindings.Durability{bindings.DurabilityFull, bindings.DurabilityNormal} {
			setting := eng + " " + string(d)
			t.Run(eng+"/"+string(d), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, uint64(len(setting))))
				var tot tally
				for r := range n {
					t.Run(fmt.Sprintf("cut%d", r), func(t *testing.T) {
						got := cutRound(t, eng, d, rng)
						tot.add(got)
						if got.corrupt > 0 || got.both > 0 || got.neither > 0 || got.holes > 0 || got.dups > 0 {
							t.Errorf("%s", got.row(setting))
						}
						// JetStream with SyncAlways does lose the newest
						// block's writes: nats-server fsyncs a new block
						// file but its directory only at its periodic sync
						// (README, Guarantees), so only SQLite's full
						// promises no loss.
						if eng == "sqlite" && d == bindings.DurabilityFull && (got.lost > 0 || got.resurrected > 0) {
							t.Errorf("durability full lost acknowledged operations: %s", got.row(setting))
						}
					})
				}
				t.Logf("| setting | cuts | ops acknowledged | lost | resurrected | in both | in neither | corrupt | holes | dups | max age of a loss | most lost in one cut |")
				t.Logf("%s (torn writes: %d)", tot.row(setting), tot.torn)
			})
		}
	}
}

// roles are the processes of one round.
var roles = []string{"producer", "producer", "consumer", "acker", "redriver", "kv", "kv"}

// jsRoles are those of a JetStream round (no dead-letter queue there), after
// the server.
var jsRoles = []string{"producer", "producer", "consumer", "acker", "kv", "kv"}

func cutRound(t *testing.T, eng string, d bindings.Durability, rng *rand.Rand) tally {
	p := powercut.Mount(t)
	dir := p.Dir()
	ledgers := t.TempDir()
	var children []*testutil.Child
	start := func(role string, env ...string) *testutil.Child {
		name := fmt.Sprintf("%s%d", role, len(children))
		c := testutil.StartChild(t, name, "TestPowercutChild", append(env,
			envRole+"="+role, envName+"="+name, envDir+"="+dir, envDurability+"="+string(d), envEngine+"="+eng,
			envLedger+"="+filepath.Join(ledgers, name+".log"))...)
		children = append(children, c)
		return c
	}
	rs := roles
	var env []string
	if eng == "jetstream" {
		srv := start("jsserver")
		url := strings.TrimPrefix(waitReady(t, srv), "ready ")
		env = append(env, envURL+"="+url)
		rs = jsRoles
		oldStreams(t, url, dir)
	}
	for _, role := range rs {
		start(role, env...)
	}
	for _, c := range children[len(children)-len(rs):] { // the server said ready already
		waitReady(t, c)
	}
	time.Sleep(200*time.Millisecond + time.Duration(rng.Int64N(int64(1300*time.Millisecond))))
	for _, c := range children {
		_ = c.Cmd.Process.Kill() // SIGKILL, by pid
	}
	for _, c := range children {
		<-c.Done
	}
	killed := time.Now()
	rep, err := p.Cut(powercut.CutOptions{Tear: rng.IntN(2) == 0, Rand: rng})
	if err != nil {
		t.Fatalf("cut: %v", err)
	}
	// The stores go back to the paths they were used at (the moves they
	// record name them), now on the real disk.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p.RealDir(), dir); err != nil {
		t.Fatal(err)
	}
	reboot(t, dir)
	var out tally
	out.cuts = 1
	out.torn = rep.Torn
	defer func() {
		if !t.Failed() {
			return
		}
		t.Logf("cut: %+v", rep)
		if keep := os.Getenv("LOCALCLOUD_POWERCUT_KEEP"); keep != "" {
			dst := filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_"))
			if err := os.CopyFS(dst, os.DirFS(dir)); err != nil {
				t.Logf("keep the stores: %v", err)
			} else {
				t.Logf("the stores as the cut left them (after the checks' opens) are in %s", dst)
			}
		}
	}()
	if eng == "jetstream" {
		if inQ, s, ok := jetstreamState(t, d, dir, &out); ok {
			// JetStream's losses are counted, not failed (TestPowercut).
			compare(t, bindings.DurabilityNormal, inQ, map[string]int{}, s, ledgers, killed, &out)
		}
	} else if inQ, inDLQ, s, ok := sqliteState(t, d, dir, &out); ok {
		compare(t, d, inQ, inDLQ, s, ledgers, killed, &out)
	}
	out.maxLostCut = out.lost + out.resurrected
	return out
}

// reboot gives every file under dir a time before this system's boot: a
// power cut is followed by a restart, and what a process of the earlier
// boot left (a -wal, its -shm that SQLite never syncs) is then older than
// the boot, which is how a store tells a crash's leftovers from a copy.
func reboot(t *testing.T, dir string) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	var boot int64
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			boot, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if boot == 0 {
		t.Fatal("no btime in /proc/stat")
	}
	before := time.Unix(boot, 0).Add(-time.Minute)
	err = filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(path, before, before)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// entry is what the ledgers say of one message or key.
type entry struct {
	tried, sent, acking, acked, handled bool
	sentAt, ackedAt                     time.Time
}

func readLedgers(t *testing.T, dir string) (map[string]*entry, map[string][]string, map[string][2]int, []string) {
	msgs := map[string]*entry{}
	wins := map[string][]string{}   // key -> winning values
	counters := map[string][2]int{} // child -> last acknowledged, last tried
	var winKeys []string
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			kind, rest, _ := strings.Cut(sc.Text(), " ")
			ns, subject, _ := strings.Cut(rest, " ")
			at, err := strconv.ParseInt(ns, 10, 64)
			if err != nil {
				t.Fatalf("%s: bad line %q", name, sc.Text())
			}
			switch kind {
			case "T", "S", "a", "A", "H":
				e := msgs[subject]
				if e == nil {
					e = &entry{}
					msgs[subject] = e
				}
				switch kind {
				case "T":
					e.tried = true
				case "S":
					e.sent, e.sentAt = true, time.Unix(0, at)
				case "a":
					e.acking = true
				case "A":
					e.acked, e.ackedAt = true, time.Unix(0, at)
				case "H":
					e.handled = true
				}
			case "W":
				key, val, _ := strings.Cut(subject, " ")
				if len(wins[key]) == 0 {
					winKeys = append(winKeys, key)
				}
				wins[key] = append(wins[key], val)
			case "c", "C":
				child, v, _ := strings.Cut(subject, " ")
				i, _ := strconv.Atoi(v)
				c, ok := counters[child]
				if !ok {
					c = [2]int{-1, -1}
				}
				if kind == "C" {
					c[0] = i
				} else {
					c[1] = i
				}
				counters[child] = c
			}
		}
		f.Close()
	}
	return msgs, wins, counters, winKeys
}

// payloads reads every message of the queue store at dir (in flight and
// moving ones too), counting each payload.
func payloads(t *testing.T, dir string) map[string]int {
	out := map[string]int{}
	file := filepath.Join(dir, sqlitequeue.FileName)
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		return out
	}
	db, err := sql.Open("sqlite", "file:"+file+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT payload_data FROM messages`)
	if err != nil {
		t.Fatalf("read %s: %v", file, err)
	}
	defer rows.Close()
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		out[p]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func storeCheck(t *testing.T, name string, typ config.Type, path string, out *tally) {
	r, err := sqlitetools.Tools{}.Check(context.Background(), &engine.Env{}, config.Binding{Name: name, Type: typ, Path: path})
	if err != nil {
		t.Errorf("check %s: %v", path, err)
		out.corrupt++
		return
	}
	if !r.OK {
		t.Errorf("check %s after the cut: %+v", path, r.Problems)
		out.corrupt++
	}
}

// producerOf splits "m-<producer>-<i>[-poison]".
func producerOf(p string) (string, int) {
	parts := strings.Split(p, "-")
	i, _ := strconv.Atoi(parts[2])
	return parts[1], i
}

// sqliteState checks the SQLite stores under dir as the cut left them,
// opens them read-write (which finishes the moves the killed processes
// left) and returns what they hold; ok is false when a store is corrupt.
func sqliteState(t *testing.T, d bindings.Durability, dir string, out *tally) (inQ, inDLQ map[string]int, s *kv.Store, ok bool) {
	ctx := context.Background()
	qdir, dlqdir, kvdir := filepath.Join(dir, "q"), filepath.Join(dir, "dlq"), filepath.Join(dir, "kv")
	// Read-only checks first, on the files exactly as the cut left them.
	storeCheck(t, "q", config.TypeQueue, qdir, out)
	storeCheck(t, "dlq", config.TypeQueue, dlqdir, out)
	storeCheck(t, "kv", config.TypeKV, kvdir, out)
	if out.corrupt > 0 {
		return nil, nil, nil, false
	}
	for _, o := range []struct {
		dir  string
		opts []queue.Option
	}{{qdir, queueOpts(dir, d)}, {dlqdir, dlqOpts(dir, d)}} {
		if _, err := os.Stat(filepath.Join(o.dir, sqlitequeue.FileName)); err != nil {
			continue
		}
		q, err := queue.Open(ctx, o.dir, o.opts...)
		if err != nil {
			t.Fatalf("open %s after the cut: %v", o.dir, err)
		}
		if _, err := q.Stats(ctx); err != nil {
			t.Fatalf("stats %s: %v", o.dir, err)
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s, err := kv.Open(ctx, kvdir, kv.WithDurability(d))
	if err != nil {
		t.Fatalf("open kv after the cut: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return payloads(t, qdir), payloads(t, dlqdir), s, true
}

// waitReady waits for the child's "ready" line and fails the test with
// everything the child said when it says anything else first.
func waitReady(t *testing.T, c *testutil.Child) string {
	t.Helper()
	select {
	case line, ok := <-c.Lines:
		if ok && strings.HasPrefix(line, "ready") {
			return line
		}
		out := []string{line}
		for l := range c.Lines {
			out = append(out, l)
		}
		<-c.Done
		t.Fatalf("%s did not start: %s\nstderr: %s", c.Name, strings.Join(out, "\n"), c.Stderr)
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not say ready within 60s", c.Name)
	}
	return ""
}

// oldStreams creates the round's queue and kv streams and then fsyncs every
// file and directory of the server's store, as the OS has done by itself
// for streams that exist for more than a few seconds: nats-server 2.15
// never fsyncs a new stream's directory into its parent (nor the store's
// own directories), so a power cut right after an app's engine created a
// stream can take the whole stream, even with SyncAlways (seen in the first
// runs of these tests; up fsyncs them after creating its streams, see
// internal/supervisor). The rounds test the streams that outlived that
// window. (New message blocks have the same gap until the server's
// periodic sync fsyncs their directory; that one the rounds do see.)
func oldStreams(t *testing.T, url, dir string) {
	ctx := context.Background()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	q, err := queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: nc}, "q")
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := kv.OpenEngine(ctx, jsengine.KVEngine{Conn: nc}, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// jetstreamState starts a server on the JetStream store under dir as the
// cut left it and returns what the queue's stream and the kv bucket hold;
// ok is false when the server cannot read its store.
func jetstreamState(t *testing.T, d bindings.Durability, dir string, out *tally) (map[string]int, *kv.Store, bool) {
	ctx := context.Background()
	srv := startJetStream(t, dir, d)
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	inQ := map[string]int{}
	st, err := js.Stream(ctx, "LCQ_q")
	switch {
	case errors.Is(err, natsjs.ErrStreamNotFound):
	case err != nil:
		t.Errorf("stream LCQ_q after the cut: %v", err)
		out.corrupt++
		return nil, nil, false
	default:
		info, err := st.Info(ctx)
		if err != nil {
			t.Errorf("stream LCQ_q info after the cut: %v", err)
			out.corrupt++
			return nil, nil, false
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if errors.Is(err, natsjs.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("stream LCQ_q message %d: %v", seq, err)
			}
			if strings.HasPrefix(string(m.Data), "m-") {
				inQ[string(m.Data)]++
			}
		}
	}
	s, err := kv.OpenEngine(ctx, jsengine.KVEngine{Conn: nc}, "kv")
	if err != nil {
		t.Errorf("kv bucket after the cut: %v", err)
		out.corrupt++
		return nil, nil, false
	}
	t.Cleanup(func() { s.Close() })
	return inQ, s, true
}

// compare checks what the stores hold (inQ, inDLQ, s) against the ledgers.
func compare(t *testing.T, d bindings.Durability, inQ, inDLQ map[string]int, s *kv.Store, ledgers string, killed time.Time, out *tally) {
	ctx := context.Background()
	msgs, wins, counters, winKeys := readLedgers(t, ledgers)

	// The newest surviving message of each producer: a loss older than it
	// is a hole, not a loss of the most recent writes.
	newest := map[string]int{}
	for _, m := range []map[string]int{inQ, inDLQ} {
		for p, n := range m {
			if msgs[p] == nil || !msgs[p].tried {
				t.Errorf("message %q after the cut was never sent", p)
				out.dups++
				continue
			}
			if n > 1 {
				t.Errorf("message %q is %d times in one store", p, n)
				out.dups++
			}
			prod, i := producerOf(p)
			if cur, ok := newest[prod]; !ok || i > cur {
				newest[prod] = i
			}
		}
	}
	for p, e := range msgs {
		if e.sent {
			out.acked++
		}
		if e.acked {
			out.acked++
		}
		q, dl := inQ[p] > 0, inDLQ[p] > 0
		present := q || dl
		switch {
		case q && dl:
			out.both++
			t.Errorf("message %q is in both the queue and its dead-letter queue", p)
		case e.acked && present:
			out.resurrected++
			out.maxLossAge = max(out.maxLossAge, killed.Sub(e.ackedAt))
			if d == bindings.DurabilityFull {
				t.Errorf("message %q was acked (confirmed) and is back after the cut", p)
			}
		case e.sent && !present && !e.acked && !e.handled && !e.acking:
			prod, i := producerOf(p)
			last, ok := newest[prod]
			recent := !ok || i > last
			switch {
			case !recent && poison(p):
				out.neither++
				t.Errorf("dead-letter message %q (acknowledged send) is in neither queue, and a later message of %s survived", p, prod)
			case !recent:
				out.holes++
				t.Errorf("message %q (acknowledged send) is lost, and a later message of %s survived", p, prod)
			default:
				out.lost++
				out.maxLossAge = max(out.maxLossAge, killed.Sub(e.sentAt))
				if d == bindings.DurabilityFull {
					t.Errorf("message %q: send acknowledged %v before the cut, lost", p, killed.Sub(e.sentAt).Round(time.Millisecond))
				}
			}
		}
	}

	// KV: every won put-if-absent holds its value; counters hold at least
	// their last acknowledged value.
	for _, key := range winKeys {
		vals := wins[key]
		out.acked++
		if len(vals) > 1 {
			out.dups++
			t.Errorf("key %s won by %d puts: %v", key, len(vals), vals)
		}
		got, ok, err := s.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			out.lost++
			if d == bindings.DurabilityFull {
				t.Errorf("key %s: won put-if-absent lost", key)
			}
			continue
		}
		if string(got) != vals[0] {
			out.dups++
			t.Errorf("key %s = %q, but %q won it", key, got, vals[0])
		}
	}
	for child, c := range counters {
		if c[0] < 0 {
			continue
		}
		out.acked += c[0] + 1
		got, ok, err := s.Get(ctx, "c-"+child)
		if err != nil {
			t.Fatal(err)
		}
		v := -1
		if ok {
			v, _ = strconv.Atoi(string(got))
		}
		if v > c[1] {
			out.dups++
			t.Errorf("counter of %s = %d, never written (last tried %d)", child, v, c[1])
		}
		if v < c[0] {
			out.lost += c[0] - v
			if d == bindings.DurabilityFull {
				t.Errorf("counter of %s = %d after the cut; %d was acknowledged", child, v, c[0])
			}
		}
	}
}
