package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnvAndRunProvisionTheStores: without up, env and run create the
// stack's stores as up would, so an app's FromEnv (which creates nothing)
// finds them; a store that cannot be made (a jetstream binding on up's
// embedded server, up stopped) is said on stderr and the rest still works.
func TestEnvAndRunProvisionTheStores(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, goodStack+"  sessions:\n    type: kv\n    engine: jetstream\n")
	data := filepath.Join(filepath.Dir(stack), ".localcloud")
	files := []string{filepath.Join(data, "kv", "carts", "localkv.sqlite"), filepath.Join(data, "queue", "orders-dlq", "localqueue.sqlite")}
	for _, f := range files {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s exists before env (%v)", f, err)
		}
	}
	code, stdout, stderr := runApp(t, nil, "env", "-f", stack)
	if code != 0 || !strings.Contains(stdout, "LOCALCLOUD_BINDING_CARTS") {
		t.Fatalf("env: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("env did not create %s: %v", f, err)
		}
	}
	if !strings.Contains(stderr, "localcloud env: binding sessions: its store is not made") || !strings.Contains(stderr, "start localcloud up") {
		t.Errorf("env's stderr does not say why sessions has no store:\n%s", stderr)
	}
	// run: a removed store comes back before the command starts.
	if err := os.RemoveAll(filepath.Join(data, "queue")); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runApp(t, nil, "run", "-f", stack, "--", "test", "-f", files[1])
	if code != 0 {
		t.Errorf("run: the command did not find %s (exit %d)\n%s", files[1], code, stderr)
	}
}
