package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStoreCommandsRefuseJetStreamBindings: the commands that work on a
// store file say clearly that a jetstream binding is not supported yet,
// and never open or create a file for it.
func TestStoreCommandsRefuseJetStreamBindings(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, `version: 1
name: shop
notify: {listen: "127.0.0.1:0"}
bindings:
  carts: {type: kv, engine: jetstream}
  orders: {type: queue, engine: jetstream}
  files: {type: kv}
`)
	dir := filepath.Dir(stack)
	for _, args := range [][]string{
		{"kv", "get", "carts", "k"},
		{"kv", "put", "carts", "k", "v"},
		{"kv", "scan", "carts", ""},
		{"queue", "send", "orders", "hello"},
		{"queue", "receive", "orders"},
		{"queue", "peek", "orders"},
		{"queue", "stats", "orders"},
		{"queue", "tail", "orders"},
		{"queue", "purge", "orders", "--yes"},
		{"backup", "carts", filepath.Join(dir, "b.sqlite")},
		{"restore", "orders", filepath.Join(dir, "b.sqlite")},
	} {
		code, _, stderr := runApp(t, nil, append(args, "-f", stack)...)
		if code != 1 || !strings.Contains(stderr, "not supported on a jetstream binding yet") {
			t.Errorf("%v: exit %d, stderr %q; want 1 and \"not supported on a jetstream binding yet\"", args, code, stderr)
		}
	}
	code, stdout, stderr := runApp(t, nil, "check", "-f", stack)
	if code != 0 || !strings.Contains(stdout, "carts: skipped") || !strings.Contains(stdout, "orders: skipped") {
		t.Errorf("check: exit %d\n%s%s", code, stdout, stderr)
	}
	_, stdout, stderr = runApp(t, nil, "status", "-f", stack)
	if !strings.Contains(stdout+stderr, "jetstream") {
		t.Errorf("status says nothing of the jetstream bindings:\n%s%s", stdout, stderr)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sqlite") || e.Name() == "kv" || e.Name() == "queue" {
			t.Errorf("a command created %s next to the stack", e.Name())
		}
	}
}

// TestAsyncAPILeavesOutJetStreamQueues: a jetstream queue gets no hint
// channel (JetStream wakes its consumers itself).
func TestAsyncAPILeavesOutJetStreamQueues(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, "version: 1\nname: shop\nbindings:\n  jobs: {type: queue}\n  orders: {type: queue, engine: jetstream}\n")
	code, stdout, stderr := runApp(t, nil, "asyncapi", "-f", stack, "--json")
	if code != 0 || !strings.Contains(stdout, "localcloud.shop.jobs.available") || strings.Contains(stdout, "localcloud.shop.orders.available") {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
}
