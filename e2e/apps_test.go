package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
)

// appMain is the test binary re-executed as an app under localcloud run.
// It prints its results on stdout and returns its exit code.
func appMain(mode string) int {
	ctx := context.Background()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "app:", err)
		return 3
	}
	switch mode {
	case "env":
		// Print the contract's variables and exit 7.
		out := map[string]string{}
		for _, e := range os.Environ() {
			if k, v, _ := strings.Cut(e, "="); strings.HasPrefix(k, "LOCALCLOUD_") || k == "E2E_KEEP" {
				out[k] = v
			}
		}
		_ = json.NewEncoder(os.Stdout).Encode(out)
		return 7
	case "wait-signal":
		// Exit 42 on SIGTERM; say when it listens.
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		fmt.Println("waiting")
		select {
		case <-c:
			return 42
		case <-time.After(30 * time.Second):
			return 1
		}
	case "write":
		s, err := kv.FromEnv(ctx, "carts")
		if err != nil {
			return fail(err)
		}
		defer s.Close()
		if _, err := s.Put(ctx, "greeting", []byte("hello")); err != nil {
			return fail(err)
		}
		if _, err := s.Put(ctx, "gone", []byte("x"), kv.WithTTL(0)); err != nil {
			return fail(err)
		}
		q, err := queue.FromEnv(ctx, "orders")
		if err != nil {
			return fail(err)
		}
		defer q.Close()
		for i := range 2 {
			if err := q.Send(ctx, queue.JSON(map[string]int{"order": i})); err != nil {
				return fail(err)
			}
		}
		fmt.Println("written")
		return 0
	case "read":
		s, err := kv.FromEnv(ctx, "carts")
		if err != nil {
			return fail(err)
		}
		defer s.Close()
		v, ok, err := s.Get(ctx, "greeting")
		if err != nil || !ok {
			return fail(fmt.Errorf("get greeting: %v, found %v", err, ok))
		}
		q, err := queue.FromEnv(ctx, "orders")
		if err != nil {
			return fail(err)
		}
		defer q.Close()
		msgs, err := q.Receive(ctx, 1)
		if err != nil || len(msgs) != 1 {
			return fail(fmt.Errorf("receive: %v, %d messages", err, len(msgs)))
		}
		if err := q.Ack(ctx, msgs[0].ReceiptHandle); err != nil {
			return fail(err)
		}
		fmt.Printf("greeting=%s message=%s\n", v, msgs[0].Payload.Data)
		return 0
	case "missing":
		_, err := kv.FromEnv(ctx, "nope")
		fmt.Printf("setup failed=%v: %v\n", bindings.CodeOf(err) == bindings.CodeBindingSetupFailed, err)
		_, err = queue.FromEnv(ctx, "carts") // a kv binding
		fmt.Printf("wrong service: %v\n", err)
		return 0
	}
	if code, ok := opsAppMain(mode); ok { // ops_test.go
		return code
	}
	if code, ok := hintsAppMain(mode); ok { // hints_test.go
		return code
	}
	if code, ok := chaosAppMain(mode); ok { // chaos_apps_test.go
		return code
	}
	if code, ok := deliveryAppMain(mode); ok { // delivery_test.go
		return code
	}
	if code, ok := jetStreamAppMain(mode); ok { // jetstream_test.go
		return code
	}
	fmt.Fprintf(os.Stderr, "app: unknown mode %q\n", mode)
	return 2
}

// app runs the test binary as an app under localcloud run.
func app(t *testing.T, s stack, mode string) *proc {
	t.Helper()
	cmd := exec.Command(binary, "run", "-f", s.file, "--", os.Args[0], "-test.run=^$")
	cmd.Env = environ(envAppMode+"="+mode, "E2E_KEEP=kept")
	return startCmd(t, cmd)
}

func TestRunPassesEnvironmentExitCodeAndSignals(t *testing.T) {
	t.Parallel()
	s := newStack(t, "  carts:\n    type: kv\n  orders-dlq:\n    type: queue\n")

	// Without up: no NATS URL (port 0), a note on stderr.
	p := app(t, s, "env")
	if code := p.waitExit(eventTimeout); code != 7 {
		t.Fatalf("exit %d, want the app's 7", code)
	}
	var env map[string]string
	if err := json.Unmarshal([]byte(p.stdout.String()), &env); err != nil {
		t.Fatalf("%v: %s", err, p.stdout)
	}
	if _, ok := env["LOCALCLOUD_NATS_URL"]; ok || !strings.Contains(p.stderr(), "LOCALCLOUD_NATS_URL is not set") {
		t.Errorf("without up: env %v, stderr %s", env, p.stderr())
	}

	up, _ := s.up(t)
	rt := s.runtime(t)
	p = app(t, s, "env")
	if code := p.waitExit(eventTimeout); code != 7 {
		t.Fatalf("exit %d, want 7", code)
	}
	env = nil
	if err := json.Unmarshal([]byte(p.stdout.String()), &env); err != nil {
		t.Fatalf("%v: %s", err, p.stdout)
	}
	var kvb kv.EnvBinding
	var qb queue.EnvBinding
	if err := json.Unmarshal([]byte(env["LOCALCLOUD_BINDING_CARTS"]), &kvb); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(env["LOCALCLOUD_BINDING_ORDERS_DLQ"]), &qb); err != nil {
		t.Fatal(err)
	}
	if env["E2E_KEEP"] != "kept" || env["LOCALCLOUD_NATS_URL"] != rt.NATSURL || env["LOCALCLOUD_STACK_NAME"] != "shop" ||
		kvb.Service != "local-kv" || kvb.DataDir != s.dataDir()+"/kv/carts" ||
		qb.Service != "local-queue" || qb.QueuePath != s.dataDir()+"/queue/orders-dlq" || qb.Subject != "localcloud.shop.orders-dlq.available" {
		t.Errorf("env = %v", env)
	}

	// env prints the same, for shells and for JSON readers.
	code, stdout, _ := runCLI(t, "env", "-f", s.file)
	if code != 0 || !strings.Contains(stdout, "export LOCALCLOUD_NATS_URL='"+rt.NATSURL+"'\n") ||
		!strings.Contains(stdout, "export LOCALCLOUD_BINDING_CARTS='"+env["LOCALCLOUD_BINDING_CARTS"]+"'\n") {
		t.Errorf("env: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = runCLI(t, "env", "-f", s.file, "--format", "json")
	var m map[string]string
	if err := json.Unmarshal([]byte(stdout), &m); code != 0 || err != nil || m["LOCALCLOUD_BINDING_ORDERS_DLQ"] != env["LOCALCLOUD_BINDING_ORDERS_DLQ"] {
		t.Errorf("env --format json: exit %d, %v\n%s", code, err, stdout)
	}

	// Signals reach the app; run exits with the app's code.
	p = app(t, s, "wait-signal")
	deadline := time.Now().Add(eventTimeout)
	for !strings.Contains(p.stdout.String(), "waiting") {
		if time.Now().After(deadline) || p.exited() {
			t.Fatalf("app not waiting: %q %s", p.stdout, p.stderr())
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.signal(syscall.SIGTERM)
	if code := p.waitExit(eventTimeout); code != 42 {
		t.Errorf("exit %d, want the app's 42", code)
	}

	up.signal(syscall.SIGTERM)
	if code := up.waitExit(stopLimit); code != 0 {
		t.Fatalf("up exit %d", code)
	}
}

func TestAppsUseTheStoresThroughFromEnv(t *testing.T) {
	t.Parallel()
	s := newStack(t, "  carts:\n    type: kv\n  orders:\n    type: queue\n    visibilityTimeout: 1m\n")
	up, _ := s.up(t)

	w := app(t, s, "write")
	if code := w.waitExit(eventTimeout); code != 0 || !strings.Contains(w.stdout.String(), "written") {
		t.Fatalf("writer: exit %d, %q %s", code, w.stdout, w.stderr())
	}
	r := app(t, s, "read")
	if code := r.waitExit(eventTimeout); code != 0 {
		t.Fatalf("reader: exit %d: %s", code, r.stderr())
	}
	if got := r.stdout.String(); got != "greeting=hello message={\"order\":0}\n" {
		t.Errorf("reader printed %q", got)
	}

	// status counts what the apps left: 1 live and 1 expired key, 1 due message.
	st := s.status(t)
	c, o := st.binding("carts"), st.binding("orders")
	if c.KV == nil || c.KV.Live != 1 || c.KV.Expired != 1 {
		t.Errorf("carts counts %+v", c.KV)
	}
	if o.Queue == nil || o.Queue.Due != 1 || o.Queue.InFlight != 0 || o.Queue.OldestAgeMillis <= 0 {
		t.Errorf("orders counts %+v", o.Queue)
	}
	code, stdout, _ := runCLI(t, "status", "-f", s.file)
	for _, want := range []string{"up: running, pid ", "1 live key, 1 expired", "1 due, 0 in flight, 0 delayed, oldest"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, stdout)
		}
	}

	// A missing or mistyped binding is a clear error naming the variable.
	m := app(t, s, "missing")
	if code := m.waitExit(eventTimeout); code != 0 {
		t.Fatalf("exit %d: %s", code, m.stderr())
	}
	out := m.stdout.String()
	for _, want := range []string{"setup failed=true", "LOCALCLOUD_BINDING_NOPE is not set", `LOCALCLOUD_BINDING_CARTS: service is "local-kv", which no queue engine`} {
		if !strings.Contains(out, want) {
			t.Errorf("app output lacks %q:\n%s", want, out)
		}
	}

	up.signal(syscall.SIGTERM)
	if code := up.waitExit(stopLimit); code != 0 {
		t.Fatalf("up exit %d", code)
	}
	// The data outlives up.
	r = app(t, s, "read")
	if code := r.waitExit(eventTimeout); code != 0 || !strings.Contains(r.stdout.String(), "message={\"order\":1}") {
		t.Errorf("reader after up stopped: exit %d, %q %s", code, r.stdout, r.stderr())
	}
}
