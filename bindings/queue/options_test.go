package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
)

func TestWithHintsValidated(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]Option{
		"url without subject": WithHints("nats://127.0.0.1:4222", "", ""),
		"negative poll":       WithPollInterval(-time.Second),
	} {
		_, err := Open(context.Background(), t.TempDir(), opt)
		if !errors.Is(err, bindings.ErrInvalidInput) {
			t.Errorf("%s: Open error = %v, want INVALID_INPUT", name, err)
		}
	}
}

func TestPollWaitJitter(t *testing.T) {
	t.Parallel()
	for range 1000 {
		if d := pollWait(time.Second); d < 800*time.Millisecond || d > 1200*time.Millisecond {
			t.Fatalf("pollWait(1s) = %s, want within +-20%%", d)
		}
	}
}
