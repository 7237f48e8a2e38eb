package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // integrityOK's read-only connection

	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/engine/sqlitetools"
	"github.com/localcloud/localcloud/internal/testutil"
)

// The stack of the load apps (loadApp): a queue with the default 30 s
// lease, so no lease ends during these tests, and a KV store.
const loadBindings = "  " + loadQueue + ":\n    type: queue\n  " + loadKV + ":\n    type: kv\n"

// loadMember is one incarnation of a load app.
type loadMember struct {
	name, log string
	p         *proc
	killed    bool
}

func startLoad(t *testing.T, env []string, logs, name string) *loadMember {
	t.Helper()
	m := &loadMember{name: name, log: filepath.Join(logs, name+".log")}
	m.p = startApp(t, env, "load", envName+"="+name, envLog+"="+m.log)
	return m
}

// waitLines waits until the app has logged at least n lines.
func (m *loadMember) waitLines(t *testing.T, n int) {
	t.Helper()
	testutil.CheckFor(t, eventTimeout, 10*time.Millisecond, m.name+" to log "+strconv.Itoa(n)+" lines", func() bool {
		if m.p.exited() {
			t.Fatalf("%s exited (code %d):\n%s", m.name, m.p.exitCode, m.p.stderr())
		}
		return len(readLog(t, m.log)) >= n
	})
}

// loadLogs is what load apps logged.
type loadLogs struct {
	sent, got, acked map[string]bool
	puts             map[string]string // key -> value
	lines            int
}

func readLoadLogs(t *testing.T, ms []*loadMember) loadLogs {
	t.Helper()
	l := loadLogs{sent: map[string]bool{}, got: map[string]bool{}, acked: map[string]bool{}, puts: map[string]string{}}
	for _, m := range ms {
		for _, line := range readLog(t, m.log) {
			l.lines++
			switch line.kind {
			case "sent":
				l.sent[line.str("id")] = true
			case "got":
				l.got[line.str("id")] = true
			case "acked":
				l.acked[line.str("id")] = true
			case "put":
				l.puts[line.str("key")] = line.str("val")
			default:
				t.Fatalf("%s: unknown line %s %v", m.name, line.kind, line.fields)
			}
		}
	}
	return l
}

// queueRows opens the queue store in dir with the library, as an app
// would, and returns its messages: payload id -> attempt.
func queueRows(t *testing.T, dir string) map[string]int {
	t.Helper()
	ctx := context.Background()
	q, eq, err := sqlitetools.OpenQueue(ctx, dir)
	if err != nil {
		t.Fatalf("open the queue store %s: %v", dir, err)
	}
	defer q.Close()
	rows, err := eq.DB().R.QueryContext(ctx, `SELECT payload_data, attempt FROM messages`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var data string
		var att int
		if err := rows.Scan(&data, &att); err != nil {
			t.Fatal(err)
		}
		var p idPayload
		if err := json.Unmarshal([]byte(data), &p); err != nil {
			t.Fatalf("%s: payload %q: %v", dir, data, err)
		}
		out[p.ID] = att
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// kvRows opens the KV store in dir with the library and returns its keys
// and values.
func kvRows(t *testing.T, dir string) map[string]string {
	t.Helper()
	ctx := context.Background()
	s, es, err := sqlitetools.OpenKV(ctx, dir)
	if err != nil {
		t.Fatalf("open the KV store %s: %v", dir, err)
	}
	defer s.Close()
	rows, err := es.DB().R.QueryContext(ctx, `SELECT key, value FROM kv`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k string
		var v []byte
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		out[k] = string(v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// integrityOK runs PRAGMA integrity_check on the database file through a
// read-only connection of its own.
func integrityOK(t *testing.T, file string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+file+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`PRAGMA integrity_check`)
	if err != nil {
		t.Fatalf("integrity_check of %s: %v", file, err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("integrity_check of %s: %v", file, err)
	}
	if len(lines) != 1 || lines[0] != "ok" {
		t.Errorf("integrity_check of %s: %q, want ok", file, lines)
	}
}

func loadDirs(s stack) (queueDir, kvDir string) {
	return filepath.Join(s.dataDir(), "queue", loadQueue), filepath.Join(s.dataDir(), "kv", loadKV)
}

// TestSIGTERMToUpUnderLoad stops up with SIGTERM while 4 apps send,
// receive, ack and put as fast as they can: up exits 0 within 5 s, the apps
// go on without it, and once everything stopped the stores hold exactly
// what the apps saw succeed. Then up starts again on the same data.
func TestSIGTERMToUpUnderLoad(t *testing.T) {
	t.Parallel()
	s := newStack(t, loadBindings)
	up, _ := s.up(t)
	env := appEnvOf(t, s)
	logs := t.TempDir()
	var apps []*loadMember
	for i := range 4 {
		apps = append(apps, startLoad(t, env, logs, "l"+strconv.Itoa(i+1)))
	}
	for _, m := range apps {
		m.waitLines(t, 100) // 25 rounds: in full swing
	}

	began := time.Now()
	up.signal(syscall.SIGTERM)
	if code := up.waitExit(stopLimit); code != 0 {
		t.Fatalf("up: exit %d after SIGTERM under load", code)
	}
	stopped := time.Since(began)
	// The apps do not need up: each keeps working.
	for _, m := range apps {
		m.waitLines(t, len(readLog(t, m.log))+100)
	}
	for _, m := range apps {
		terminate(t, m.p)
		exitOK(t, m.p, m.name)
	}

	queueDir, kvDir := loadDirs(s)
	integrityOK(t, filepath.Join(queueDir, sqlitequeue.FileName))
	integrityOK(t, filepath.Join(kvDir, sqlitekv.FileName))
	l := readLoadLogs(t, apps)
	msgs, keys := queueRows(t, queueDir), kvRows(t, kvDir)
	// Every app stopped cleanly, so every effect is logged: exact sets.
	for id := range l.acked {
		if !l.sent[id] || !l.got[id] {
			t.Errorf("%s acked but not sent and received", id)
		}
		if _, ok := msgs[id]; ok {
			t.Errorf("%s was acked but is still in the queue", id)
		}
	}
	for id := range l.sent {
		if _, ok := msgs[id]; !ok && !l.acked[id] {
			t.Errorf("%s was sent and never acked but is not in the queue: lost", id)
		}
	}
	for id, att := range msgs {
		if !l.sent[id] {
			t.Errorf("the queue holds %s, which no app sent", id)
		}
		if att != 0 {
			t.Errorf("%s is left with attempt %d; every received message was acked", id, att)
		}
	}
	if len(msgs) != len(l.sent)-len(l.acked) {
		t.Errorf("the queue holds %d messages, want %d sent - %d acked", len(msgs), len(l.sent), len(l.acked))
	}
	for k, v := range l.puts {
		if keys[k] != v {
			t.Errorf("key %s = %q, want %q as put", k, keys[k], v)
		}
	}
	if len(keys) != len(l.puts) {
		t.Errorf("the KV store holds %d keys, the apps put %d", len(keys), len(l.puts))
	}
	t.Logf("up stopped %s after SIGTERM under 4 apps' load; the apps logged %d operations: %d sends, %d acks, %d puts",
		stopped.Round(time.Millisecond), l.lines, len(l.sent), len(l.acked), len(l.puts))

	// up starts again on the same data and counts it.
	up, _ = s.up(t)
	st := s.status(t)
	if b := st.binding(loadKV); b.KV == nil || b.KV.Live != int64(len(l.puts)) {
		t.Errorf("status after restart: %s %+v, want %d live keys", loadKV, b.KV, len(l.puts))
	}
	if b := st.binding(loadQueue); b.Queue == nil || b.Queue.Due != int64(len(msgs)) || b.Queue.InFlight != 0 {
		t.Errorf("status after restart: %s %+v, want %d due", loadQueue, b.Queue, len(msgs))
	}
	up.signal(syscall.SIGTERM)
	if code := up.waitExit(stopLimit); code != 0 {
		t.Fatalf("restarted up: exit %d after SIGTERM", code)
	}
	if code, stdout, stderr := runCLI(t, "check", "-f", s.file); code != 0 {
		t.Errorf("localcloud check: exit %d\n%s%s", code, stdout, stderr)
	}
}

// sigkillRounds is how many SIGKILLs TestSIGKILLLeavesStoresThatOpen sends;
// every fourth goes to up, the others to the two load apps in turn.
const sigkillRounds = 24

// TestSIGKILLLeavesStoresThatOpen SIGKILLs load apps (and up) at random
// moments. After each kill the stores open with the library and pass
// integrity_check, and every write the killed app saw succeed is there: its
// puts with their values, its acks gone, and every message sent before
// either still queued or received by someone. At the end, with every app
// stopped, the stores hold exactly what the logs say, up to the one call a
// killed app may not have logged.
func TestSIGKILLLeavesStoresThatOpen(t *testing.T) {
	t.Parallel()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	s := newStack(t, loadBindings)
	up, _ := s.up(t)
	env := appEnvOf(t, s)
	logs := t.TempDir()
	queueDir, kvDir := loadDirs(s)

	var all []*loadMember
	starts := 0
	next := func() *loadMember {
		starts++
		m := startLoad(t, env, logs, "k"+strconv.Itoa(starts))
		all = append(all, m)
		return m
	}
	slots := []*loadMember{next(), next()}
	slots[0].waitLines(t, 1)
	slots[1].waitLines(t, 1)

	midLoad := 0
	for round := range sigkillRounds {
		time.Sleep(time.Duration(rng.Int64N(int64(300 * time.Millisecond)))) // a random moment
		var victim *loadMember
		if round%4 == 3 {
			up.signal(syscall.SIGKILL)
			if code := up.waitExit(eventTimeout); code != 128+int(syscall.SIGKILL) {
				t.Fatalf("up: exit %d, want killed", code)
			}
		} else {
			victim = slots[round%2]
			if victim.p.exited() {
				t.Fatalf("%s exited by itself (code %d):\n%s", victim.name, victim.p.exitCode, victim.p.stderr())
			}
			victim.killed = true
			victim.p.signal(syscall.SIGKILL)
			if code := victim.p.waitExit(eventTimeout); code != 128+int(syscall.SIGKILL) {
				t.Fatalf("%s: exit %d, want killed", victim.name, code)
			}
		}

		// Read the logs' sends before the stores and their receipts after:
		// a message sent before the store was read is there or was
		// received (logged before its ack) by then.
		before := readLoadLogs(t, all)
		msgs, keys := queueRows(t, queueDir), kvRows(t, kvDir)
		after := readLoadLogs(t, all)
		integrityOK(t, filepath.Join(queueDir, sqlitequeue.FileName))
		integrityOK(t, filepath.Join(kvDir, sqlitekv.FileName))
		for id := range before.sent {
			if _, ok := msgs[id]; !ok && !after.got[id] {
				t.Errorf("round %d: %s was sent, is not in the queue and nobody received it", round, id)
			}
		}
		if victim != nil {
			mine := readLoadLogs(t, []*loadMember{victim})
			if mine.lines > 0 {
				midLoad++
			}
			for k, v := range mine.puts {
				if keys[k] != v {
					t.Errorf("round %d: %s put %s = %q before it was killed; the store has %q", round, victim.name, k, v, keys[k])
				}
			}
			for id := range mine.acked {
				if _, ok := msgs[id]; ok {
					t.Errorf("round %d: %s acked %s before it was killed; it is back in the queue", round, victim.name, id)
				}
			}
			slots[round%2] = next()
		} else {
			up, _ = s.up(t)
		}
		if t.Failed() {
			t.FailNow()
		}
	}

	for _, m := range slots {
		terminate(t, m.p)
		exitOK(t, m.p, m.name)
	}
	up.signal(syscall.SIGTERM)
	if code := up.waitExit(stopLimit); code != 0 {
		t.Fatalf("up: exit %d after SIGTERM", code)
	}
	if code, stdout, stderr := runCLI(t, "check", "-f", s.file); code != 0 {
		t.Errorf("localcloud check: exit %d\n%s%s", code, stdout, stderr)
	}
	integrityOK(t, filepath.Join(queueDir, sqlitequeue.FileName))
	integrityOK(t, filepath.Join(kvDir, sqlitekv.FileName))
	checkLoadEnd(t, all, queueRows(t, queueDir), kvRows(t, kvDir))
	t.Logf("%d SIGKILLs (%d of up, %d of apps, %d of them after the app's first logged operation), seed %d",
		sigkillRounds, sigkillRounds/4, sigkillRounds-sigkillRounds/4, midLoad, seed)
}

// checkLoadEnd compares the stores with the logs of load apps that have
// all ended. A killed app may have done one call it did not log: a send of
// the id after its last logged one, a put of the key after its last logged
// one, or the ack of its last received message.
func checkLoadEnd(t *testing.T, ms []*loadMember, msgs map[string]int, keys map[string]string) {
	t.Helper()
	l := readLoadLogs(t, ms)
	maySend, mayAck := map[string]bool{}, map[string]bool{}
	mayPut := map[string]string{} // key -> value
	for _, m := range ms {
		if !m.killed {
			continue
		}
		sent, put := 0, 0
		lastGot, lastAcked := "", ""
		for _, line := range readLog(t, m.log) {
			switch line.kind {
			case "sent":
				sent++
			case "put":
				put++
			case "got":
				lastGot = line.str("id")
			case "acked":
				lastAcked = line.str("id")
			}
		}
		maySend[m.name+"-"+strconv.Itoa(sent+1)] = true
		mayPut[m.name+"-"+strconv.Itoa(put+1)] = "v" + strconv.Itoa(put+1)
		if lastGot != "" && lastGot != lastAcked {
			mayAck[lastGot] = true
		}
	}
	var ids []string
	for id := range msgs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if !l.sent[id] && !maySend[id] {
			t.Errorf("the queue holds %s, which was never sent", id)
		}
		if l.acked[id] {
			t.Errorf("%s was acked but is in the queue", id)
		}
	}
	for id := range l.sent {
		if _, ok := msgs[id]; !ok && !l.acked[id] && !mayAck[id] {
			t.Errorf("%s was sent, never acked, and is not in the queue: lost", id)
		}
	}
	for k, v := range l.puts {
		if keys[k] != v {
			t.Errorf("key %s = %q, want %q as put", k, keys[k], v)
		}
	}
	for k, v := range keys {
		if _, ok := l.puts[k]; !ok && mayPut[k] != v {
			t.Errorf("the KV store holds %s = %q, which no app put", k, v)
		}
	}
	t.Logf("at the end: %d sent, %d acked, %d left in the queue, %d keys", len(l.sent), len(l.acked), len(msgs), len(keys))
}
