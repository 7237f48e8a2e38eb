package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	_ "modernc.org/sqlite" // the foreign writer's driver

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/testutil"
)

// Knobs of the hint apps, set in their environment by the tests.
const (
	envPoll       = "E2E_POLL"       // consumer: fallback poll, a Go duration
	envVisibility = "E2E_VISIBILITY" // consumer: lease of each claim
	envBlock      = "E2E_BLOCK"      // consumer: "1" makes the handler block forever
	envCount      = "E2E_COUNT"      // producer: messages to send
	envIDPrefix   = "E2E_ID"         // producer, foreign writer: payload id prefix
	envSeed       = "E2E_SEED"       // foreign trickle writer: seed of its random gaps
)

// Budgets of the hint tests. slowPoll is the consumers' fallback poll when
// only a wake-up may explain a quick delivery: jittered by +-20%, it never
// fires before 24 s, far beyond hintLatency.
const (
	slowPoll    = 30 * time.Second
	hintLatency = 3 * time.Second // send (or lease end) to handled, woken by a hint or timer
)

// hintsAppMain runs the apps of this file; ok is false for other modes.
func hintsAppMain(mode string) (code int, ok bool) {
	switch mode {
	case "hints-consume":
		return consumeApp(), true
	case "hints-produce":
		return produceApp(), true
	case "hints-foreign-insert":
		return foreignInsertApp(), true
	case "hints-foreign-trickle":
		return foreignTrickleApp(), true
	}
	return 0, false
}

// consumeApp consumes the orders binding with queue.FromEnv and Consume
// until SIGTERM, printing one line per delivery:
//
//	got id=3 attempt=1 at=<unix ms> us=<unix µs> payload={"id":"p-3"}
func consumeApp() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var poll, vis time.Duration
	var err error
	if v := os.Getenv(envPoll); v != "" {
		if poll, err = time.ParseDuration(v); err != nil {
			return appFail(err)
		}
	}
	var opts []queue.ConsumeOption
	if v := os.Getenv(envVisibility); v != "" {
		if vis, err = time.ParseDuration(v); err != nil {
			return appFail(err)
		}
		opts = append(opts, queue.ConsumeVisibility(vis))
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	q, err := queue.FromEnv(ctx, "orders", queue.WithPollInterval(poll), queue.WithLogger(log))
	if err != nil {
		return appFail(err)
	}
	defer q.Close()
	block := os.Getenv(envBlock) == "1"
	fmt.Println("consuming")
	err = q.Consume(ctx, func(ctx context.Context, m queue.Message) error {
		now := time.Now()
		fmt.Printf("got id=%d attempt=%d at=%d us=%d payload=%s\n", m.ID, m.Attempt, now.UnixMilli(), now.UnixMicro(), m.Payload.Data)
		if block {
			select {} // until the test kills this process
		}
		return nil
	}, opts...)
	if err != nil {
		return appFail(err)
	}
	return 0
}

// produceApp sends E2E_COUNT messages {"id":"<E2E_ID>-<i>"} with
// queue.FromEnv, printing "sent id=<id> at=<unix ms>" after each commit.
func produceApp() int {
	ctx := context.Background()
	n, err := strconv.Atoi(os.Getenv(envCount))
	if err != nil {
		return appFail(err)
	}
	q, err := queue.FromEnv(ctx, "orders")
	if err != nil {
		return appFail(err)
	}
	defer q.Close()
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("%s-%d", os.Getenv(envIDPrefix), i)
		if err := q.Send(ctx, queue.JSON(map[string]string{"id": id})); err != nil {
			return appFail(err)
		}
		fmt.Printf("sent id=%s at=%d\n", id, time.Now().UnixMilli())
	}
	return 0
}

// foreignInsertApp is a writer that knows nothing of localcloud: it finds
// the queue directory in the binding's JSON, opens the file with plain
// database/sql and inserts one message {"id":"<E2E_ID>"} with the spec's
// statement, then prints "inserted at=<unix ms>". It publishes no hint.
func foreignInsertApp() int {
	var b struct {
		QueuePath string `json:"queuePath"`
	}
	if err := json.Unmarshal([]byte(os.Getenv("LOCALCLOUD_BINDING_ORDERS")), &b); err != nil {
		return appFail(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(b.QueuePath, "localqueue.sqlite")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return appFail(err)
	}
	defer db.Close()
	now := time.Now().UnixMilli()
	payload := `{"id":"` + os.Getenv(envIDPrefix) + `"}`
	if _, err := db.Exec(`INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES (?1, ?2, ?3, ?3, 0)`, "json", payload, now); err != nil {
		return appFail(err)
	}
	fmt.Printf("inserted at=%d\n", time.Now().UnixMilli())
	return 0
}

// foreignTrickleApp is foreignInsertApp for E2E_COUNT messages
// {"id":"<E2E_ID>-<i>"}, each after a random pause of 20..300 ms (seeded by
// E2E_SEED) on one connection, printing "inserted id=<id> us=<unix µs>"
// after each commit. It takes no lock file and publishes no hint.
func foreignTrickleApp() int {
	n, err := strconv.Atoi(os.Getenv(envCount))
	if err != nil {
		return appFail(err)
	}
	seed, err := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	if err != nil {
		return appFail(err)
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	var b struct {
		QueuePath string `json:"queuePath"`
	}
	if err := json.Unmarshal([]byte(os.Getenv("LOCALCLOUD_BINDING_ORDERS")), &b); err != nil {
		return appFail(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(b.QueuePath, "localqueue.sqlite")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return appFail(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for i := 1; i <= n; i++ {
		time.Sleep(20*time.Millisecond + time.Duration(rng.Int64N(int64(280*time.Millisecond)+1)))
		id := fmt.Sprintf("%s-%d", os.Getenv(envIDPrefix), i)
		now := time.Now().UnixMilli()
		if _, err := db.Exec(`INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES (?1, ?2, ?3, ?3, 0)`, "json", `{"id":"`+id+`"}`, now); err != nil {
			return appFail(err)
		}
		fmt.Printf("inserted id=%s us=%d\n", id, time.Now().UnixMicro())
	}
	return 0
}

// usOf returns the us=<unix µs> field of an app's line.
func usOf(t *testing.T, line string) time.Time {
	t.Helper()
	return time.UnixMicro(intField(t, line, "us"))
}

// intField returns the integer of the name=<int> field of an app's line.
func intField(t *testing.T, line, name string) int64 {
	t.Helper()
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				break
			}
			return n
		}
	}
	t.Fatalf("no %s= field in %q", name, line)
	return 0
}

func appFail(err error) int {
	fmt.Fprintln(os.Stderr, "app:", err)
	return 3
}

// appEnvOf returns the app environment of s as `localcloud env --format
// json` gives it: what `localcloud run` would pass.
func appEnvOf(t *testing.T, s stack) []string {
	t.Helper()
	code, stdout, stderr := runCLI(t, "env", "-f", s.file, "--format", "json")
	if code != 0 {
		t.Fatalf("env: exit %d: %s", code, stderr)
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(stdout), &m); err != nil {
		t.Fatalf("env --format json: %v\n%s", err, stdout)
	}
	var env []string
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	return env
}

// startApp runs the test binary as a hint app with env (from appEnvOf) and
// knobs. It is this process's direct child, so its pid is the app's own:
// SIGKILL reaches the consumer, not a wrapper.
func startApp(t *testing.T, env []string, mode string, knobs ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = environ(append(append(env, envAppMode+"="+mode), knobs...)...)
	return startCmd(t, cmd)
}

// waitStdout polls the process's stdout until a line contains sub and
// returns that line. It fails the test on timeout or when the process
// ends without printing it.
func waitStdout(t *testing.T, p *proc, timeout time.Duration, sub string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		exited := p.exited() // before reading: a line printed before exit is seen
		for _, l := range strings.Split(p.stdout.String(), "\n") {
			if strings.Contains(l, sub) {
				return l
			}
		}
		if exited {
			t.Fatalf("process exited (code %d) without printing %q; stdout:\n%s\nstderr:\n%s", p.exitCode, sub, p.stdout, p.stderr())
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stdout line with %q within %s; stdout:\n%s\nstderr:\n%s", sub, timeout, p.stdout, p.stderr())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// atOf returns the at=<unix ms> field of an app's line.
func atOf(t *testing.T, line string) time.Time {
	t.Helper()
	return time.UnixMilli(intField(t, line, "at"))
}

// exitOK waits for an app to exit 0.
func exitOK(t *testing.T, p *proc, what string) {
	t.Helper()
	if code := p.waitExit(eventTimeout); code != 0 {
		t.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", what, code, p.stdout, p.stderr())
	}
}

// handledWithin waits for consumer c to print the delivery of the message
// with payload id and checks it came at most limit after from.
func handledWithin(t *testing.T, c *proc, id string, from time.Time, limit time.Duration) string {
	t.Helper()
	line := waitStdout(t, c, limit+eventTimeout, `payload={"id":"`+id+`"}`)
	lag := atOf(t, line).Sub(from)
	if lag > limit {
		t.Fatalf("%s handled %s after it was sent, want at most %s", id, lag, limit)
	}
	t.Logf("%s handled %s after it was sent", id, lag)
	return line
}

const ordersStack = "  orders:\n    type: queue\n"

func TestHintsConsumerHandlesWhatAProducerSends(t *testing.T) {
	t.Parallel()
	s := newStack(t, ordersStack)
	s.up(t)
	env := appEnvOf(t, s)
	c := startApp(t, env, "hints-consume", envPoll+"="+slowPoll.String())
	waitStdout(t, c, eventTimeout, "consuming")

	const n = 20
	p := startApp(t, env, "hints-produce", envCount+"="+strconv.Itoa(n), envIDPrefix+"=p")
	exitOK(t, p, "producer")
	var worst time.Duration
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("p-%d", i)
		sent := atOf(t, waitStdout(t, p, eventTimeout, "sent id="+id+" "))
		got := atOf(t, handledWithin(t, c, id, sent, hintLatency))
		worst = max(worst, got.Sub(sent))
	}
	t.Logf("%d messages, worst send-to-handled %s (fallback poll %s)", n, worst, slowPoll)
}

func TestHintsForeignWriterWakesTheConsumer(t *testing.T) {
	t.Parallel()
	s := newStack(t, ordersStack)
	s.up(t)
	env := appEnvOf(t, s)
	c := startApp(t, env, "hints-consume", envPoll+"="+slowPoll.String())
	waitStdout(t, c, eventTimeout, "consuming")

	// Only up can wake c: the writer publishes nothing, c polls every 30 s.
	for _, id := range []string{"foreign-1", "foreign-2"} {
		w := startApp(t, env, "hints-foreign-insert", envIDPrefix+"="+id)
		exitOK(t, w, "foreign writer")
		handledWithin(t, c, id, atOf(t, waitStdout(t, w, 0, "inserted")), hintLatency)
	}
}

// TestHintsForeignTrickleWakesTheConsumer: with `up` running, a writer in
// another process that knows nothing of localcloud (database/sql, the
// spec's INSERT, no lock file) commits at random 20-300 ms gaps, and a
// Consume in a third process with the default 1 s fallback poll handles
// every message, woken by up's hints: most within a few milliseconds, far
// under the poll. The strict figures are BenchmarkForeignWriterToHandler's.
func TestHintsForeignTrickleWakesTheConsumer(t *testing.T) {
	t.Parallel()
	s := newStack(t, ordersStack)
	s.up(t)
	env := appEnvOf(t, s)
	c := startApp(t, env, "hints-consume")
	waitStdout(t, c, eventTimeout, "consuming")

	const n = 40
	seed := uint64(time.Now().UnixNano())
	t.Logf("writer seed %d", seed)
	w := startApp(t, env, "hints-foreign-trickle", envCount+"="+strconv.Itoa(n), envIDPrefix+"=t", envSeed+"="+strconv.FormatUint(seed, 10))
	exitOK(t, w, "foreign writer")
	lat := make([]time.Duration, 0, n)
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("t-%d", i)
		committed := usOf(t, waitStdout(t, w, 0, "inserted id="+id+" "))
		got := waitStdout(t, c, eventTimeout, `payload={"id":"`+id+`"}`)
		if !strings.Contains(got, "attempt=1 ") {
			t.Errorf("%s delivered more than once: %q", id, got)
		}
		lat = append(lat, usOf(t, got).Sub(committed))
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[int(math.Ceil(p*float64(n)))-1] }
	t.Logf("commit to handled, %d messages: p50 %s, p90 %s, max %s", n, pct(0.5), pct(0.9), lat[n-1])
	// The poll alone would spread them over 0..1.2 s (p50 ~500 ms). Loose,
	// for a loaded machine; a lost hint costs one message a poll interval.
	if pct(0.5) > 50*time.Millisecond || pct(0.9) > 200*time.Millisecond {
		t.Fatalf("p50 %s, p90 %s: the consumer was not woken by hints", pct(0.5), pct(0.9))
	}
	if n := strings.Count(c.stdout.String(), "got id="); n != 40 {
		t.Fatalf("%d deliveries, want 40:\n%s", n, c.stdout)
	}
}

func TestHintsRedeliverAfterAConsumerIsKilledMidLease(t *testing.T) {
	t.Parallel()
	s := newStack(t, ordersStack)
	s.up(t)
	env := appEnvOf(t, s)
	// Consume extends a running handler's lease every third of it, so the
	// lease ends at most 2 s after A dies and at least ~1.3 s after.
	const lease = 2 * time.Second
	a := startApp(t, env, "hints-consume", envPoll+"="+slowPoll.String(), envVisibility+"="+lease.String(), envBlock+"=1")
	waitStdout(t, a, eventTimeout, "consuming")
	exitOK(t, startApp(t, env, "hints-produce", envCount+"=1", envIDPrefix+"=k"), "producer")
	waitStdout(t, a, eventTimeout, `attempt=1 at=`)

	// B starts while A holds the lease: nothing is due for it yet.
	b := startApp(t, env, "hints-consume", envPoll+"="+slowPoll.String())
	waitStdout(t, b, eventTimeout, "consuming")
	a.signal(syscall.SIGKILL)
	if code := a.waitExit(eventTimeout); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("consumer A exit %d, want killed", code)
	}
	leaseEnd := leaseEndOf(t, s, `{"id":"k-1"}`)

	line := waitStdout(t, b, eventTimeout, `payload={"id":"k-1"}`)
	if !strings.Contains(line, "attempt=2 ") {
		t.Fatalf("B got %q, want attempt 2", line)
	}
	lag := atOf(t, line).Sub(leaseEnd)
	if lag < -5*time.Millisecond || lag > 1500*time.Millisecond {
		t.Fatalf("redelivered %s after the lease ended, want 0 to 1.5 s", lag)
	}
	t.Logf("redelivered to B %s after A's lease ended", lag)
}

// leaseEndOf reads the visible_at of the orders message with payload data,
// which must still be in its first lease (attempt 1). The test process
// holds no other connection to the file.
func leaseEndOf(t *testing.T, s stack, data string) time.Time {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(s.dataDir(), "queue", "orders", "localqueue.sqlite")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var visibleAt int64
	var attempt int
	if err := db.QueryRow(`SELECT visible_at, attempt FROM messages WHERE payload_data = ?`, data).Scan(&visibleAt, &attempt); err != nil {
		t.Fatalf("read the lease of %s: %v", data, err)
	}
	if attempt != 1 {
		t.Fatalf("%s is at attempt %d already; the lease ended before it could be read", data, attempt)
	}
	return time.UnixMilli(visibleAt)
}

func TestHintsConsumersSurviveUpStoppingAndStarting(t *testing.T) {
	t.Parallel()
	s := newStack(t, ordersStack)
	// A fixed port, so the NATS URL the consumers were given stays valid
	// across the restart of up.
	writeRaw(t, s.file, strings.Replace(stackText(ordersStack), "127.0.0.1:0", "127.0.0.1:"+strconv.Itoa(testutil.FreePort(t)), 1))
	up, _ := s.up(t)
	env := appEnvOf(t, s)
	const fastPoll = 500 * time.Millisecond
	fast := startApp(t, env, "hints-consume", envPoll+"="+fastPoll.String())
	slow := startApp(t, env, "hints-consume", envPoll+"="+slowPoll.String())
	waitStdout(t, fast, eventTimeout, "consuming")
	waitStdout(t, slow, eventTimeout, "consuming")

	// Without up (no NATS at all) the fast poller still gets the message
	// within a few of its poll intervals.
	up.signal(syscall.SIGTERM)
	if code := up.waitExit(stopLimit); code != 0 {
		t.Fatalf("up exit %d", code)
	}
	p := startApp(t, env, "hints-produce", envCount+"=1", envIDPrefix+"=down")
	exitOK(t, p, "producer")
	handledWithin(t, fast, "down-1", atOf(t, waitStdout(t, p, 0, "sent id=down-1")), 3*fastPoll)
	fast.signal(syscall.SIGTERM)
	exitOK(t, fast, "fast consumer")

	// With up back on the same port, the slow poller is woken again: the
	// first write within its reconnect (a reconnection also wakes it, as a
	// hint may have been lost meanwhile), the second by a hint for sure.
	s.up(t)
	for _, id := range []string{"back-1", "back-2"} {
		w := startApp(t, env, "hints-foreign-insert", envIDPrefix+"="+id)
		exitOK(t, w, "foreign writer")
		handledWithin(t, slow, id, atOf(t, waitStdout(t, w, 0, "inserted")), hintLatency)
	}
}

func TestHintsReachAThirdPartyNATSClient(t *testing.T) {
	t.Parallel()
	s := newStack(t, ordersStack)
	s.up(t)
	rt := s.runtime(t)
	var subject string
	for _, b := range rt.Bindings {
		if b.Name == "orders" {
			subject = b.Subject
		}
	}
	if subject != "localcloud.shop.orders.available" {
		t.Fatalf("runtime.json subject %q", subject)
	}
	// A plain NATS client: no localcloud code below, only the URL and the
	// subject from runtime.json.
	nc, err := nats.Connect(rt.NATSURL, nats.Timeout(eventTimeout))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the server has the subscription
		t.Fatal(err)
	}

	began := time.Now()
	exitOK(t, startApp(t, appEnvOf(t, s), "hints-produce", envCount+"=1", envIDPrefix+"=x"), "producer")
	m, err := sub.NextMsg(eventTimeout)
	if err != nil {
		t.Fatalf("no hint on %s: %v", subject, err)
	}
	var h map[string]any
	if err := json.Unmarshal(m.Data, &h); err != nil {
		t.Fatalf("hint %q is not JSON: %v", m.Data, err)
	}
	due, dueOK := h["due"].(float64)
	at, atOK := h["at"].(float64)
	if h["binding"] != "orders" || !dueOK || due < -1 || !atOK || time.UnixMilli(int64(at)).Before(began.Add(-time.Second)) {
		t.Fatalf("hint %s, want binding orders, due >= -1 and a recent at", m.Data)
	}
	t.Logf("hint on %s: %s", m.Subject, m.Data)
}

// TestExamplesProducerAndWorker runs the README's quick start: the two
// example apps under localcloud run against examples/stack.yaml.
func TestExamplesProducerAndWorker(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator),
		"github.com/localcloud/localcloud/examples/producer", "github.com/localcloud/localcloud/examples/worker")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the examples: %v\n%s", err, out)
	}
	text, err := os.ReadFile(filepath.Join("..", "examples", "stack.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, "")
	writeRaw(t, s.file, string(text)) // its dataDir is relative: the temp dir
	s.up(t)

	// run forwards signals to the worker but cannot forward SIGKILL: put
	// both in a process group of their own and kill the group at the end.
	worker := exec.Command(binary, "run", "-f", s.file, "--", filepath.Join(bin, "worker"))
	worker.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w := startCmd(t, worker)
	t.Cleanup(func() { _ = syscall.Kill(-w.pid(), syscall.SIGKILL) })
	waitStdout(t, w, eventTimeout, "waiting for orders")

	const n = 20
	code, out, stderr := runCLI(t, "run", "-f", s.file, "--", filepath.Join(bin, "producer"), "-n", strconv.Itoa(n))
	if code != 0 || !strings.Contains(out, fmt.Sprintf("sent %d orders", n)) {
		t.Fatalf("producer: exit %d, %q %s", code, out, stderr)
	}
	for i := 1; i <= n; i++ {
		waitStdout(t, w, eventTimeout, fmt.Sprintf("order %d: ", i))
	}
	w.signal(syscall.SIGTERM)
	exitOK(t, w, "worker")
	if !strings.Contains(w.stdout.String(), "worker: stopped") {
		t.Errorf("worker did not stop cleanly:\n%s", w.stdout)
	}
}
