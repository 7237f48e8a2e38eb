package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binary is the localcloud binary TestMain builds.
var binary string

// envAppMode switches the test binary into one of the app programs of
// apps_test.go.
const envAppMode = "LOCALCLOUD_E2E_APP"

func TestMain(m *testing.M) {
	if mode := os.Getenv(envAppMode); mode != "" {
		os.Exit(appMain(mode))
	}
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "localcloud-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	binary = filepath.Join(tmp, "localcloud")
	build := exec.Command("go", "build", "-o", binary, "github.com/localcloud/localcloud/cmd/localcloud")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build localcloud:", err)
		return 1
	}
	return m.Run()
}
