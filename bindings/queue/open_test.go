package queue_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
)

func TestOpenOptionsValidated(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "q")
	for _, d := range []time.Duration{0, queue.MaxVisibility + 1} {
		_, err := queue.Open(ctx, dir, queue.WithDefaultVisibility(d))
		wantCode(t, err, bindings.ErrInvalidInput, "default visibility")
		_, err = queue.OpenMemory(ctx, "opts-validated", queue.WithDefaultVisibility(d))
		wantCode(t, err, bindings.ErrInvalidInput, "default visibility")
	}
	_, err := queue.Open(ctx, dir, queue.WithDurability("fast"))
	wantCode(t, err, bindings.ErrInvalidInput, "durability", "fast")
	_, err = queue.OpenMemory(ctx, "no/slashes")
	wantCode(t, err, bindings.ErrInvalidInput, "name")
	_, err = queue.Open(ctx, "")
	wantCode(t, err, bindings.ErrInvalidInput, "dir")
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rejected opens created %s (stat: %v)", dir, err)
	}
}

func wantCode(t *testing.T, err error, code *bindings.Error, mentions ...string) {
	t.Helper()
	if !errors.Is(err, code) {
		t.Fatalf("err = %v; want %s", err, code.Code)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
}
