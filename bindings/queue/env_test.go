package queue

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

func mapLookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestEnvNameMatchesConfig(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"orders", "orders-dlq", "a-b-c9"} {
		if got, want := EnvName(n), config.EnvName(n); got != want {
			t.Errorf("EnvName(%q) = %q, config.EnvName = %q", n, got, want)
		}
	}
}

func TestFromEnvErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := []struct {
		name, value string
		set         bool
		want        string
	}{
		{name: "missing", want: "is not set"},
		{name: "empty", set: true, value: "", want: "is empty"},
		{name: "malformed", set: true, value: `{service:1}`, want: "want JSON"},
		{name: "wrong service", set: true, value: `{"service":"local-kv","dataDir":"` + dir + `"}`, want: `service is "local-kv"`},
		{name: "no queuePath", set: true, value: `{"service":"local-queue"}`, want: "queuePath is missing"},
		{name: "relative queuePath", set: true, value: `{"service":"local-queue","queuePath":"q"}`, want: "absolute path"},
		{name: "bad durability", set: true, value: `{"service":"local-queue","queuePath":"` + dir + `","durability":"x"}`, want: "durability"},
		{name: "bad visibility", set: true, value: `{"service":"local-queue","queuePath":"` + dir + `","visibilityTimeout":"soon"}`, want: "visibilityTimeout"},
		{name: "visibility out of range", set: true, value: `{"service":"local-queue","queuePath":"` + dir + `","visibilityTimeout":"13h"}`, want: "visibilityTimeout"},
		{name: "maxAttempts without deadLetter", set: true, value: `{"service":"local-queue","queuePath":"` + dir + `","maxAttempts":3}`, want: "deadLetter"},
		{name: "maxAttempts out of range", set: true, value: `{"service":"local-queue","queuePath":"` + dir + `","maxAttempts":1001,"deadLetter":{"binding":"d","queuePath":"/d"}}`, want: "maxAttempts"},
		{name: "relative deadLetter", set: true, value: `{"service":"local-queue","queuePath":"` + dir + `","maxAttempts":3,"deadLetter":{"binding":"d","queuePath":"d"}}`, want: "deadLetter.queuePath must be an absolute path"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{}
			if c.set {
				env["LOCALCLOUD_BINDING_ORDERS_DLQ"] = c.value
			}
			q, err := fromEnv(context.Background(), "orders-dlq", mapLookup(env), nil)
			if err == nil {
				q.Close()
				t.Fatal("no error")
			}
			if !errors.Is(err, bindings.ErrBindingSetupFailed) {
				t.Errorf("error %v does not match ErrBindingSetupFailed", err)
			}
			for _, w := range []string{"LOCALCLOUD_BINDING_ORDERS_DLQ", c.want} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestFromEnvOpensTheQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "queue", "orders")
	dlq := filepath.Join(filepath.Dir(dir), "orders-dlq")
	env := map[string]string{
		"LOCALCLOUD_BINDING_ORDERS": `{"service":"local-queue","queuePath":"` + dir +
			`","subject":"localcloud.shop.orders.available","visibilityTimeout":"45s","durability":"normal","maxAttempts":5,` +
			`"deadLetter":{"binding":"orders-dlq","queuePath":"` + dlq + `"},"futureField":true}`,
	}
	provision(t, dir)
	provision(t, dlq)
	q, err := fromEnv(ctx, "orders", mapLookup(env), nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.visibility != 45*time.Second {
		t.Errorf("default visibility = %s, want 45s from the environment", q.visibility)
	}
	if n, d, b := ExportEngine(q).DeadLetterPolicy(); n != 5 || d != dlq || b != "orders" {
		t.Errorf("dead-letter policy %d into %q, binding %q; want 5 attempts into %s, binding orders", n, d, b, dlq)
	}
	if want := filepath.Join(dir, sqlitequeue.FileName); q.Path() != want {
		t.Errorf("Path() = %q, want %q", q.Path(), want)
	}
	if err := q.Send(ctx, Text("hello")); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(ctx, 1)
	if err != nil || len(msgs) != 1 || msgs[0].Payload.Data != "hello" {
		t.Fatalf("Receive = %+v, %v", msgs, err)
	}
	q.Close()

	// Options given by the caller win over the environment.
	q, err = fromEnv(ctx, "orders", mapLookup(env), []Option{WithDefaultVisibility(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if q.visibility != time.Second {
		t.Errorf("default visibility = %s, want the caller's 1s", q.visibility)
	}
	b, err := readEnv("orders", mapLookup(env))
	if err != nil || b.Subject != "localcloud.shop.orders.available" {
		t.Errorf("readEnv = %+v, %v", b, err)
	}
}

func TestFromEnvProcessEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LOCALCLOUD_BINDING_ORDERS", `{"service":"local-queue","queuePath":"`+dir+`","subject":"s"}`)
	provision(t, dir)
	q, err := FromEnv(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	if b, err := ReadEnv("orders"); err != nil || b.Subject != "s" {
		t.Fatalf("ReadEnv = %+v, %v", b, err)
	}
}

func TestFromEnvTurnsHintsOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	provision(t, dir)
	binding := `{"service":"local-queue","queuePath":"` + dir + `","subject":"localcloud.shop.orders.available"}`
	// Nothing is dialed before the first hint or wait, so an unused port is fine.
	const url = "nats://127.0.0.1:1"
	cases := []struct {
		name                string
		env                 map[string]string
		opts                []Option
		url, token, subject string
	}{
		{name: "url, token and subject",
			env: map[string]string{"LOCALCLOUD_BINDING_ORDERS": binding, bindings.EnvNATSURL: url, bindings.EnvNATSToken: "secret"},
			url: url, token: "secret", subject: "localcloud.shop.orders.available"},
		{name: "no url: polling only",
			env: map[string]string{"LOCALCLOUD_BINDING_ORDERS": binding}},
		{name: "no subject: polling only",
			env: map[string]string{"LOCALCLOUD_BINDING_ORDERS": `{"service":"local-queue","queuePath":"` + dir + `"}`, bindings.EnvNATSURL: url}},
		{name: "caller turns hints off",
			env:  map[string]string{"LOCALCLOUD_BINDING_ORDERS": binding, bindings.EnvNATSURL: url},
			opts: []Option{WithHints("", "", "")}},
		{name: "caller's server wins",
			env:  map[string]string{"LOCALCLOUD_BINDING_ORDERS": binding, bindings.EnvNATSURL: url},
			opts: []Option{WithHints("nats://127.0.0.1:2", "", "mine")},
			url:  "nats://127.0.0.1:2", subject: "mine"},
	}
	for _, c := range cases {
		q, err := fromEnv(ctx, "orders", mapLookup(c.env), c.opts)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		url, token, subject := ExportEngine(q).HintOptions()
		if url != c.url || token != c.token || subject != c.subject {
			t.Errorf("%s: hints (%q, %q, %q), want (%q, %q, %q)", c.name, url, token, subject, c.url, c.token, c.subject)
		}
		q.Close()
	}
}

// TestFromEnvVisibilityMillis: visibilityTimeoutMs, the integer a program in
// any language can read, stands for visibilityTimeout on its own, and when
// both are given they must agree.
func TestFromEnvVisibilityMillis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	provision(t, dir)
	base := `{"service":"local-queue","queuePath":"` + dir + `"`
	for _, c := range []struct {
		name, fields string
		want         time.Duration
	}{
		{"ms only", `,"visibilityTimeoutMs":45000`, 45 * time.Second},
		{"both agree", `,"visibilityTimeout":"1m30s","visibilityTimeoutMs":90000`, 90 * time.Second},
		{"both agree below a millisecond", `,"visibilityTimeout":"1.0005s","visibilityTimeoutMs":1000`, 1000500 * time.Microsecond},
		{"string only", `,"visibilityTimeout":"2s"`, 2 * time.Second},
		{"neither", ``, DefaultVisibility},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{"LOCALCLOUD_BINDING_ORDERS": base + c.fields + "}"}
			q, err := fromEnv(ctx, "orders", mapLookup(env), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if q.visibility != c.want {
				t.Errorf("default visibility = %s, want %s", q.visibility, c.want)
			}
		})
	}
	for _, c := range []struct {
		name, fields string
		want         []string
	}{
		{"disagree", `,"visibilityTimeout":"30s","visibilityTimeoutMs":45000`,
			[]string{`visibilityTimeout "30s"`, "visibilityTimeoutMs 45000", "disagree"}},
		{"zero", `,"visibilityTimeoutMs":0`, []string{"visibilityTimeoutMs must be between 1 and 43200000", "got 0"}},
		{"negative", `,"visibilityTimeoutMs":-5`, []string{"visibilityTimeoutMs must be between 1 and 43200000", "got -5"}},
		{"too long", `,"visibilityTimeoutMs":43200001`, []string{"visibilityTimeoutMs must be between 1 and 43200000", "got 43200001"}},
		{"not an integer", `,"visibilityTimeoutMs":1.5`, []string{"visibilityTimeoutMs"}},
		{"a string", `,"visibilityTimeoutMs":"45000"`, []string{"visibilityTimeoutMs"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{"LOCALCLOUD_BINDING_ORDERS": base + c.fields + "}"}
			q, err := fromEnv(ctx, "orders", mapLookup(env), nil)
			if err == nil {
				q.Close()
				t.Fatal("no error")
			}
			if !errors.Is(err, bindings.ErrBindingSetupFailed) {
				t.Errorf("error %v does not match ErrBindingSetupFailed", err)
			}
			for _, w := range append(c.want, "LOCALCLOUD_BINDING_ORDERS") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestEnvRetryAndDedupPolicy(t *testing.T) {
	dir := t.TempDir()
	provision(t, dir)
	env := func(extra string) func(string) (string, bool) {
		js := `{"service":"local-queue","queuePath":"` + dir + `"` + extra + `}`
		return func(k string) (string, bool) {
			if k == EnvName("jobs") {
				return js, true
			}
			return "", false
		}
	}
	q, err := fromEnv(context.Background(), "jobs", env(`,"retryDelay":"200ms","retryDelayMs":200,"maxRetryDelayMs":900,"dedupWindow":"2s"`), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if q.retry.Base != 200*time.Millisecond || q.retry.Max != 900*time.Millisecond {
		t.Fatalf("retry schedule %+v", q.retry)
	}
	q2, err := fromEnv(context.Background(), "jobs", env(``), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	if q2.retry != (RetrySchedule{Base: DefaultRetryDelay, Max: DefaultMaxRetryDelay}) {
		t.Fatalf("default retry schedule %+v", q2.retry)
	}
	for extra, want := range map[string]string{
		`,"retryDelay":"soon"`:                  `retryDelay must be a duration between 0s and 12h0m0s, got "soon"`,
		`,"retryDelay":"1s","retryDelayMs":999`: `retryDelay "1s" and retryDelayMs 999 disagree`,
		`,"maxRetryDelayMs":-1`:                 `maxRetryDelayMs must be between 0 and 43200000 (milliseconds), got -1`,
		`,"dedupWindow":"0s"`:                   `dedupWindow must be a duration between 1ms and 168h0m0s, got "0s"`,
		`,"dedupWindowMs":604800001`:            `dedupWindowMs must be between 1 and 604800000 (milliseconds), got 604800001`,
	} {
		_, err := fromEnv(context.Background(), "jobs", env(extra), nil)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "LOCALCLOUD_BINDING_JOBS") {
			t.Errorf("%s: %v; want an error naming the variable and %q", extra, err, want)
		}
	}
}

// provision creates the queue store in dir, as the stack's tools do before
// an app's FromEnv.
func provision(t *testing.T, dir string) {
	t.Helper()
	q, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFromEnvCreatesNoStore: a binding whose queuePath, or whose
// dead-letter queue's, names no store (a typo, another case) is refused
// with an error naming the variable, the file it looked for and the queue
// bindings of the environment; nothing is created.
func TestFromEnvCreatesNoStore(t *testing.T) {
	root := t.TempDir()
	orders := filepath.Join(root, "queue", "orders")
	dlq := filepath.Join(root, "queue", "orders-dlq")
	provision(t, orders)
	provision(t, dlq)
	t.Setenv(EnvName("orders"), `{"service":"local-queue","queuePath":"`+orders+`"}`)
	binding := func(path, dead string) string {
		return `{"service":"local-queue","queuePath":"` + path + `","maxAttempts":3,"deadLetter":{"binding":"dlq","queuePath":"` + dead + `"}}`
	}
	for _, c := range []struct{ path, dlq, missing, what string }{
		{filepath.Join(root, "queue", "ordres"), dlq, filepath.Join(root, "queue", "ordres"), "queue"},
		{filepath.Join(root, "queue", "Orders"), dlq, filepath.Join(root, "queue", "Orders"), "queue"},
		{orders, filepath.Join(root, "queue", "orders-dql"), filepath.Join(root, "queue", "orders-dql"), "dead-letter queue"},
	} {
		t.Setenv(EnvName("payments"), binding(c.path, c.dlq))
		q, err := FromEnv(context.Background(), "payments")
		if err == nil {
			q.Close()
			t.Fatalf("FromEnv of %s (dead letters into %s) opened a queue", c.path, c.dlq)
		}
		for _, want := range []string{"LOCALCLOUD_BINDING_PAYMENTS", "the " + c.what + " store " + filepath.Join(c.missing, sqlitequeue.FileName) + " does not exist",
			"queue bindings in this environment: orders, payments", "created nothing"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
		if !errors.Is(err, bindings.ErrNoStore) || !errors.Is(err, bindings.ErrBindingSetupFailed) {
			t.Errorf("error %v: want ErrNoStore and BINDING_SETUP_FAILED", err)
		}
		if _, err := os.Stat(c.missing); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("FromEnv created %s (%v)", c.missing, err)
		}
	}
}
