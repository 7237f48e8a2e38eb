package testutil

import (
	"testing"
	"time"
)

// CheckFor polls cond every step until it is true, failing the test after
// total.
func CheckFor(t testing.TB, total, step time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(total)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", total, what)
		}
		time.Sleep(step)
	}
}
