package bindings_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAppsLinkNoServerSide checks what an app that uses the bindings links: a queue worker
// with Consume and hints (examples/worker) and a producer that uses kv and queue
// (examples/producer) must not pull in the embedded NATS server, the directory watcher's
// fsnotify or yaml.v3. Those belong to `localcloud up` only (internal/hintserver,
// internal/dirwatch, config, internal/asyncapi); go-fuse belongs to the power-cut tests only
// (internal/testutil/powercut).
func TestAppsLinkNoServerSide(t *testing.T) {
	goTool := goTool(t)
	forbidden := []string{"github.com/nats-io/nats-server", "github.com/fsnotify/fsnotify", "gopkg.in/yaml.v3", "github.com/hanwen/go-fuse"}
	for _, app := range []string{"./examples/worker", "./examples/producer"} {
		cmd := exec.Command(goTool, "list", "-deps", app)
		cmd.Dir = ".." // the module root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", app, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 || !strings.Contains(string(out), "github.com/nats-io/nats.go") {
			t.Fatalf("go list -deps %s listed %d packages without the nats.go client: the check would pass vacuously:\n%s", app, len(deps), out)
		}
		for _, d := range deps {
			for _, f := range forbidden {
				if strings.HasPrefix(d, f) {
					t.Errorf("%s links %s (from %s): apps must link the NATS client only", app, d, f)
				}
			}
		}
	}
}

// TestPublicDocsNameNoInternal checks that the documentation apps read names
// no internal package and no DB(): the bindings' API is engine-independent.
func TestPublicDocsNameNoInternal(t *testing.T) {
	goTool := goTool(t)
	for _, pkg := range []string{"./bindings/kv", "./bindings/queue", "./bindings/kv/driver", "./bindings/queue/driver"} {
		cmd := exec.Command(goTool, "doc", "-all", pkg)
		cmd.Dir = ".."
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go doc -all %s: %v\n%s", pkg, err, out)
		}
		if !strings.Contains(string(out), "type ") {
			t.Fatalf("go doc -all %s printed no types: the check would pass vacuously", pkg)
		}
		for _, bad := range []string{"internal/", "DB()", "sqlstore."} {
			if strings.Contains(string(out), bad) {
				t.Errorf("go doc -all %s mentions %q", pkg, bad)
			}
		}
	}
}

// goTool is the go command on the PATH, where "go test" puts the one that
// runs the test first; the test skips without one.
func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to list dependencies and read documentation with")
	}
	return p
}
