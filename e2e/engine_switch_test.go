package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
)

// servedTotal is what up's explorer (up's own handles) says binding name
// holds: a queue's total or a KV store's live keys.
func servedTotal(t *testing.T, s stack, name string) int64 {
	t.Helper()
	res, err := http.Get(strings.TrimSuffix(s.runtime(t).ExplorerURL, "/") + "/api/bindings/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v struct {
		Queue *struct {
			Total int64 `json:"total"`
		} `json:"queue"`
		KV *struct {
			Live int64 `json:"live"`
		} `json:"kv"`
		CountError string `json:"countError"`
	}
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/bindings/%s: %d %v", name, res.StatusCode, err)
	}
	switch {
	case v.Queue != nil:
		return v.Queue.Total
	case v.KV != nil:
		return v.KV.Live
	}
	t.Fatalf("GET /api/bindings/%s: no counts (%s)", name, v.CountError)
	return 0
}

func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("localcloud %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// TestEngineSwitchRefused: a binding whose engine changes while its old
// store holds data is refused by a hot reload (the old handle keeps
// serving the data) and by a start of up, both ways (sqlite to jetstream,
// jetstream to sqlite), with an error naming the binding, both engines,
// what the old store holds and the migrate command. A switch of a binding
// whose old store is empty goes through.
func TestEngineSwitchRefused(t *testing.T) {
	t.Parallel()
	stackOf := func(orders, carts, jobs string) string {
		return fmt.Sprintf("  orders:\n    type: queue\n    engine: %s\n  carts:\n    type: kv\n    engine: %s\n  jobs:\n    type: queue\n    engine: %s\n  fresh:\n    type: kv\n    engine: sqlite\n",
			orders, carts, jobs)
	}
	s := newStack(t, stackOf("sqlite", "sqlite", "jetstream"))
	p, _ := s.up(t)
	for i := range 5 {
		mustCLI(t, "queue", "send", "orders", fmt.Sprint("o", i), "-f", s.file)
	}
	for i := range 12 {
		mustCLI(t, "kv", "put", "carts", fmt.Sprint("k", i), "v", "-f", s.file)
	}
	for i := range 4 {
		mustCLI(t, "queue", "send", "jobs", fmt.Sprint("j", i), "-f", s.file)
	}

	// Reload, sqlite to jetstream: refused, the old handles keep serving.
	mark := p.mark()
	s.write(t, stackOf("jetstream", "jetstream", "jetstream"))
	p.waitLine(mark, eventTimeout, "keeping the last good stack")
	log := p.stderr()[mark:]
	for _, want := range []string{
		"queue binding orders is now of engine jetstream, but its sqlite store (" + s.dataDir() + "/queue/orders) holds 5 messages",
		"localcloud migrate orders --to jetstream -f " + s.file,
		"kv binding carts is now of engine jetstream, but its sqlite store (" + s.dataDir() + "/kv/carts) holds 12 keys",
		"localcloud migrate carts --to jetstream -f " + s.file,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("reload log lacks %q:\n%s", want, log)
		}
	}
	if rt := s.runtime(t); !strings.Contains(rt.LastReloadError, "holds 5 messages") {
		t.Errorf("runtime.json lastReloadError = %q", rt.LastReloadError)
	}
	if n := servedTotal(t, s, "orders"); n != 5 {
		t.Errorf("orders served %d messages after the refused reload, want 5", n)
	}
	if n := servedTotal(t, s, "carts"); n != 12 {
		t.Errorf("carts served %d keys after the refused reload, want 12", n)
	}

	// Reload, jetstream to sqlite: refused the same way.
	mark = p.mark()
	s.write(t, stackOf("sqlite", "sqlite", "sqlite"))
	p.waitLine(mark, eventTimeout, "keeping the last good stack")
	log = p.stderr()[mark:]
	if want := "queue binding jobs is now of engine sqlite, but its jetstream store (jetstream:LCQ_jobs) holds 4 messages"; !strings.Contains(log, want) ||
		!strings.Contains(log, "localcloud migrate jobs --to sqlite -f "+s.file) {
		t.Errorf("reload log lacks %q and the command:\n%s", want, log)
	}
	if n := servedTotal(t, s, "jobs"); n != 4 {
		t.Errorf("jobs served %d messages after the refused reload, want 4", n)
	}

	// An empty store switches: fresh holds nothing.
	mark = p.mark()
	s.write(t, strings.Replace(stackOf("sqlite", "sqlite", "jetstream"), "  fresh:\n    type: kv\n    engine: sqlite\n", "  fresh:\n    type: kv\n    engine: jetstream\n", 1))
	p.waitLine(mark, eventTimeout, `msg="stack reloaded"`, "reopened=fresh")
	p.signal(syscall.SIGTERM)
	if code := p.waitExit(stopLimit); code != 0 {
		t.Fatalf("up exit %d", code)
	}

	// A start of up with the switched file: refused, nothing switched.
	s.write(t, stackOf("jetstream", "sqlite", "jetstream"))
	up := start(t, "up", "-f", s.file)
	if code := up.waitExit(readyTimeout); code == 0 {
		t.Fatal("up started with orders switched to jetstream while its sqlite store holds 5 messages")
	}
	if e := up.stderr(); !strings.Contains(e, "orders is now of engine jetstream, but its sqlite store") || !strings.Contains(e, "holds 5 messages") ||
		!strings.Contains(e, "localcloud migrate orders --to jetstream") {
		t.Errorf("up's error:\n%s", e)
	}

	// jobs back to sqlite while no binding uses jetstream: up runs without
	// JetStream, cannot count the stream, and refuses (fail closed).
	s.write(t, stackOf("sqlite", "sqlite", "sqlite"))
	up = start(t, "up", "-f", s.file)
	if code := up.waitExit(readyTimeout); code == 0 {
		t.Fatal("up started with jobs switched to sqlite while its stream holds 4 messages")
	}
	if e := up.stderr(); !strings.Contains(e, "queue binding jobs is of engine sqlite, and its jetstream store (jetstream:LCQ_jobs) could not be looked at") ||
		!strings.Contains(e, "set engine: jetstream back") {
		t.Errorf("up's error:\n%s", e)
	}

	// The data is all still there once the file says what it was.
	s.write(t, stackOf("sqlite", "sqlite", "jetstream"))
	p, _ = s.up(t)
	for name, want := range map[string]int64{"orders": 5, "carts": 12, "jobs": 4} {
		if n := servedTotal(t, s, name); n != want {
			t.Errorf("%s served %d after the refusals, want %d", name, n, want)
		}
	}
	p.signal(syscall.SIGTERM)
	if code := p.waitExit(stopLimit); code != 0 {
		t.Fatalf("up exit %d", code)
	}
}
