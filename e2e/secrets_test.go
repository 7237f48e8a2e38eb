package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEmptySecretRefusedByValidateAndUp: notify.token from a variable that
// is set but empty would turn NATS auth and the explorer's login off;
// validate and up refuse it, naming the field and the variable, and up
// creates nothing.
func TestEmptySecretRefusedByValidateAndUp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "stack.yaml")
	writeRaw(t, file, "version: 1\nname: shop\nnotify:\n  listen: 127.0.0.1:0\n  token: ${SHOP_NATS_TOKEN}\nexplorer:\n  listen: 127.0.0.1:0\nbindings:\n"+ordersStack)
	for _, args := range [][]string{{"validate", file}, {"up", "-f", file}} {
		cmd := exec.Command(binary, args...)
		cmd.Env = environ("SHOP_NATS_TOKEN=")
		out, err := cmd.CombinedOutput()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 1 || !strings.Contains(string(out), "notify.token: resolves to an empty value: environment variable SHOP_NATS_TOKEN is set but empty") {
			t.Errorf("%s with SHOP_NATS_TOKEN empty: exit %d (%v)\n%s", args[0], code, err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ".localcloud")); err == nil {
		t.Error("up created the data dir of a stack it refused")
	}
	cmd := exec.Command(binary, "validate", file)
	cmd.Env = environ("SHOP_NATS_TOKEN=s3cret")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("validate with the token set: %v\n%s", err, out)
	}
}
