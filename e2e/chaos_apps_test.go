package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
)

// The apps of the chaos and lifecycle tests. Each one writes what it saw
// succeed to its own log file, a line per operation, each line with a
// single unbuffered write(2) made only after the operation returned nil: a
// SIGKILL loses at most the line of the operation in progress (and may tear
// the last line, which readLog ignores). Lines are
//
//	KIND key=value ... t=<unix µs>
//
// with the error, when there is one, last as err=<rest of the line>.

// Knobs of these apps, set in their environment by the tests.
const (
	envName   = "E2E_NAME"   // the app incarnation's name, unique in its test; prefixes the ids it sends
	envLog    = "E2E_LOG"    // the log file
	envQueues = "E2E_QUEUES" // chaos apps: the queue bindings, comma-separated
	envPause  = "E2E_PAUSE"  // chaos producer: pause between sends
	envWork   = "E2E_WORK"   // chaos consumer: the handler's work between its ledger put and its ack
)

// Bindings the apps use.
const (
	ledgerBinding = "ledger" // chaos consumer: put-if-not-exists ledger
	loadQueue     = "work"   // load app
	loadKV        = "state"  // load app
)

// sigtermTrapped is the stderr line an app prints once SIGTERM stops it
// cleanly; before that SIGTERM kills it (exit 143).
const sigtermTrapped = "app: SIGTERM trapped"

// trapSIGTERM returns a context that SIGTERM cancels and says so on stderr.
func trapSIGTERM() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	fmt.Fprintln(os.Stderr, sigtermTrapped)
	return ctx, stop
}

// terminate sends SIGTERM to app p once p traps it, so an app started a
// moment ago is stopped, not killed.
func terminate(t *testing.T, p *proc) {
	t.Helper()
	p.waitLine(0, eventTimeout, sigtermTrapped)
	p.signal(syscall.SIGTERM)
}

// chaosAppMain runs the apps of this file; ok is false for other modes.
func chaosAppMain(mode string) (code int, ok bool) {
	switch mode {
	case "chaos-produce":
		return chaosProduce(), true
	case "chaos-consume":
		return chaosConsume(), true
	case "load":
		return loadApp(), true
	}
	return 0, false
}

// lineLog is an app's log file. Safe for concurrent use: each line is one
// write(2) of an O_APPEND file, which the kernel does not interleave.
type lineLog struct{ f *os.File }

func openLineLog() (*lineLog, error) {
	path := os.Getenv(envLog)
	if path == "" {
		return nil, errors.New(envLog + " is not set")
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &lineLog{f: f}, nil
}

// line writes kind, the fields (pairs of key and value) and t=now. A value
// under the key "err" must come last.
func (l *lineLog) line(kind string, kvs ...any) error {
	b := []byte(kind)
	for i := 0; i+1 < len(kvs); i += 2 {
		b = fmt.Appendf(b, " %s=%v", kvs[i], kvs[i+1])
	}
	b = fmt.Appendf(b, " t=%d\n", time.Now().UnixMicro())
	_, err := l.f.Write(b)
	return err
}

// exitWhenOrphaned ends the app if the test process that started it is
// gone (a test binary killed by its timeout cannot clean up after itself).
func exitWhenOrphaned() {
	parent := os.Getppid()
	go func() {
		for range time.Tick(500 * time.Millisecond) {
			if os.Getppid() != parent {
				os.Exit(5)
			}
		}
	}()
}

// durationKnob parses the duration in the variable name; def when unset.
func durationKnob(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}

// idPayload is the payload every app sends: {"id":"<name>-<n>"}.
type idPayload struct {
	ID string `json:"id"`
}

func idOf(m queue.Message) (string, error) {
	var p idPayload
	if err := json.Unmarshal([]byte(m.Payload.Data), &p); err != nil || p.ID == "" {
		return "", fmt.Errorf("message %d: payload %q has no id: %v", m.ID, m.Payload.Data, err)
	}
	return p.ID, nil
}

// chaosProduce sends {"id":"<name>-<n>"} for n = 1, 2, ... to the queues of
// E2E_QUEUES in turn (n-th message to queue n mod len), pausing E2E_PAUSE
// between sends, until SIGTERM. After each Send that returned nil it logs
//
//	sent q=<queue> id=<id> t=...
//
// A send in progress when SIGTERM comes is finished and logged.
func chaosProduce() int {
	exitWhenOrphaned()
	ctx, stop := trapSIGTERM()
	defer stop()
	name := os.Getenv(envName)
	pause, err := durationKnob(envPause, 10*time.Millisecond)
	if err != nil {
		return appFail(err)
	}
	log, err := openLineLog()
	if err != nil {
		return appFail(err)
	}
	names := strings.Split(os.Getenv(envQueues), ",")
	qs := make([]*queue.Queue, len(names))
	for i, n := range names {
		if qs[i], err = queue.FromEnv(context.Background(), n); err != nil { // a SIGTERM now stops the loop, not the open
			return appFail(err)
		}
		defer qs[i].Close()
	}
	for n := 1; ctx.Err() == nil; n++ {
		i := n % len(qs)
		id := name + "-" + strconv.Itoa(n)
		// Not ctx: a send that started is finished, then logged.
		if err := qs[i].Send(context.Background(), queue.JSON(idPayload{ID: id})); err != nil {
			return appFail(fmt.Errorf("send %s to %s: %w", id, names[i], err))
		}
		if err := log.line("sent", "q", names[i], "id", id); err != nil {
			return appFail(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	return 0
}

// chaosConsume consumes every queue of E2E_QUEUES, one goroutine per queue
// taking one message at a time with ReceiveWait (the hint path), until
// SIGTERM. For each delivery it logs, in this order:
//
//	got q=<queue> id=<id> att=<attempt> rcpt=<receipt> t=...     before handling
//	put q=... id=... att=... won=<bool> t=...                   after the ledger's put-if-not-exists of <queue>:<id>
//	acked q=... id=... att=... t0=<µs before Ack> t=...         after Ack returned nil
//
// or, instead of put or acked, a line "fail" with op=put or op=ack, stale=
// (whether the receipt was stale) and err= when that call failed; the
// message is then left for its lease to end. E2E_WORK is slept between put
// and Ack, the handler's work. A message being handled when SIGTERM comes
// is finished.
func chaosConsume() int {
	exitWhenOrphaned()
	ctx, stop := trapSIGTERM()
	defer stop()
	work, err := durationKnob(envWork, 0)
	if err != nil {
		return appFail(err)
	}
	log, err := openLineLog()
	if err != nil {
		return appFail(err)
	}
	ledger, err := kv.FromEnv(context.Background(), ledgerBinding) // a SIGTERM now stops the loops, not the open
	if err != nil {
		return appFail(err)
	}
	defer ledger.Close()
	names := strings.Split(os.Getenv(envQueues), ",")
	errs := make(chan error, len(names))
	var wg sync.WaitGroup
	for _, n := range names {
		q, err := queue.FromEnv(context.Background(), n)
		if err != nil {
			return appFail(err)
		}
		defer q.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := consumeLoop(ctx, q, n, ledger, log, work); err != nil {
				errs <- err
				stop() // the other loops end too
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return appFail(err)
	}
	return 0
}

func consumeLoop(ctx context.Context, q *queue.Queue, name string, ledger *kv.Store, log *lineLog, work time.Duration) error {
	bg := context.Background() // handling is not cut short by SIGTERM
	for {
		if ctx.Err() != nil {
			return nil
		}
		msgs, err := q.ReceiveWait(ctx, 1, 5*time.Second)
		if err != nil && ctx.Err() != nil {
			return nil // ReceiveWait claimed nothing
		}
		if err != nil {
			return fmt.Errorf("receive from %s: %w", name, err)
		}
		for _, m := range msgs {
			id, err := idOf(m)
			if err != nil {
				return err
			}
			if err := log.line("got", "q", name, "id", id, "att", m.Attempt, "rcpt", m.ReceiptHandle); err != nil {
				return err
			}
			won, err := ledger.Put(bg, name+":"+id, []byte(os.Getenv(envName)), kv.IfNotExists())
			if err != nil {
				if err := log.line("fail", "op", "put", "q", name, "id", id, "att", m.Attempt, "stale", false, "err", err); err != nil {
					return err
				}
				continue
			}
			if err := log.line("put", "q", name, "id", id, "att", m.Attempt, "won", won); err != nil {
				return err
			}
			if work > 0 {
				time.Sleep(work)
			}
			t0 := time.Now().UnixMicro()
			if err := q.Ack(bg, m.ReceiptHandle); err != nil {
				if err := log.line("fail", "op", "ack", "q", name, "id", id, "att", m.Attempt, "stale", errors.Is(err, queue.ErrStaleReceipt), "err", err); err != nil {
					return err
				}
				continue
			}
			if err := log.line("acked", "q", name, "id", id, "att", m.Attempt, "t0", t0); err != nil {
				return err
			}
		}
	}
}

// loadApp works the queue "work" and the KV store "state" as fast as it
// can until SIGTERM, each round: send {"id":"<name>-<n>"}, put key
// <name>-<n> = v<n>, receive one message (anyone's) and ack it. After each
// call that returned nil it logs
//
//	sent id=<id> t=...
//	put key=<key> val=<value> t=...
//	got id=<id> att=<attempt> t=...
//	acked id=<id> t=...
//
// A failing call ends it with exit 3; so does a stale receipt, which the
// 30 s lease of these tests never explains. A round in progress when
// SIGTERM comes is finished.
func loadApp() int {
	exitWhenOrphaned()
	ctx, stop := trapSIGTERM()
	defer stop()
	bg := context.Background()
	name := os.Getenv(envName)
	log, err := openLineLog()
	if err != nil {
		return appFail(err)
	}
	q, err := queue.FromEnv(bg, loadQueue)
	if err != nil {
		return appFail(err)
	}
	defer q.Close()
	s, err := kv.FromEnv(bg, loadKV)
	if err != nil {
		return appFail(err)
	}
	defer s.Close()
	deadline := time.Now().Add(5 * time.Minute) // a bound for a lost test
	for n := 1; ctx.Err() == nil && time.Now().Before(deadline); n++ {
		id := name + "-" + strconv.Itoa(n)
		if err := q.Send(bg, queue.JSON(idPayload{ID: id})); err != nil {
			return appFail(err)
		}
		if err := log.line("sent", "id", id); err != nil {
			return appFail(err)
		}
		val := "v" + strconv.Itoa(n)
		if _, err := s.Put(bg, id, []byte(val)); err != nil {
			return appFail(err)
		}
		if err := log.line("put", "key", id, "val", val); err != nil {
			return appFail(err)
		}
		msgs, err := q.Receive(bg, 1)
		if err != nil {
			return appFail(err)
		}
		for _, m := range msgs {
			got, err := idOf(m)
			if err != nil {
				return appFail(err)
			}
			if err := log.line("got", "id", got, "att", m.Attempt); err != nil {
				return appFail(err)
			}
			if err := q.Ack(bg, m.ReceiptHandle); err != nil {
				return appFail(err)
			}
			if err := log.line("acked", "id", got); err != nil {
				return appFail(err)
			}
		}
	}
	return 0
}

// logLine is one complete line of an app's log.
type logLine struct {
	kind   string
	fields map[string]string
}

func (l logLine) str(key string) string { return l.fields[key] }

func (l logLine) num(t *testing.T, key string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(l.fields[key], 10, 64)
	if err != nil {
		t.Fatalf("log line %s %v: field %s: %v", l.kind, l.fields, key, err)
	}
	return n
}

// at returns the time of field key (unix µs).
func (l logLine) at(t *testing.T, key string) time.Time { return time.UnixMicro(l.num(t, key)) }

// readLog reads an app's log file (a missing file is an empty log). A last
// line without its newline was torn by a kill and is left out; any other
// line that does not parse fails the test.
func readLog(t *testing.T, path string) []logLine {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.LastIndexByte(data, '\n'); i < len(data)-1 {
		data = data[:i+1] // the torn line of a killed app
	}
	var out []logLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		kind, rest, _ := strings.Cut(text, " ")
		l := logLine{kind: kind, fields: map[string]string{}}
		for rest != "" {
			var tok string
			if strings.HasPrefix(rest, "err=") {
				// The error runs to the time, the line's last field.
				i := strings.LastIndex(rest, " t=")
				if i < 0 {
					t.Fatalf("%s:%d: no t= after err=: %q", path, n, text)
				}
				l.fields["err"], rest = rest[len("err="):i], rest[i+1:]
				continue
			}
			tok, rest, _ = strings.Cut(rest, " ")
			k, v, ok := strings.Cut(tok, "=")
			if !ok || k == "" {
				t.Fatalf("%s:%d: malformed field %q in %q", path, n, tok, text)
			}
			l.fields[k] = v
		}
		if kind == "" || l.fields["t"] == "" {
			t.Fatalf("%s:%d: malformed line %q", path, n, text)
		}
		out = append(out, l)
	}
	return out
}
