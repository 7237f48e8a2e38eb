package queue

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRetryScheduleDoublesWithJitterAndCap computes the back-off with
// fixed "random" numbers: 0.5 is the middle (no jitter), 0 and just under 1
// the -20% and +20% ends.
func TestRetryScheduleDoublesWithJitterAndCap(t *testing.T) {
	s := RetrySchedule{Base: 200 * time.Millisecond, Max: 5 * time.Minute}
	mid := func() float64 { return 0.5 }
	low := func() float64 { return 0 }
	high := func() float64 { return 0.999999999 }
	for attempt, want := range map[int]time.Duration{1: 200 * time.Millisecond, 2: 400 * time.Millisecond, 3: 800 * time.Millisecond, 4: 1600 * time.Millisecond} {
		if got := s.Delay(attempt, mid); got != want {
			t.Errorf("attempt %d: delay %s, want %s", attempt, got, want)
		}
		if got, w := s.Delay(attempt, low), want*8/10; got != w {
			t.Errorf("attempt %d, jitter -20%%: delay %s, want %s", attempt, got, w)
		}
		if got, w := s.Delay(attempt, high), want*12/10; got < w-time.Microsecond || got > w {
			t.Errorf("attempt %d, jitter +20%%: delay %s, want about %s", attempt, got, w)
		}
	}
	def := RetrySchedule{Base: DefaultRetryDelay, Max: DefaultMaxRetryDelay}
	if got := def.Delay(1, mid); got != time.Second {
		t.Errorf("default first delay %s, want 1s", got)
	}
	// 1s * 2^8 = 256s, 2^9 = 512s > 5m: capped, also with +20% jitter.
	if got := def.Delay(9, mid); got != 256*time.Second {
		t.Errorf("attempt 9: %s, want 4m16s", got)
	}
	for _, a := range []int{10, 11, 50, 1000, 1 << 30} {
		if got := def.Delay(a, high); got != DefaultMaxRetryDelay {
			t.Errorf("attempt %d: %s, want the cap %s", a, got, DefaultMaxRetryDelay)
		}
	}
	if got := (RetrySchedule{Base: 0, Max: time.Minute}).Delay(3, mid); got != 0 {
		t.Errorf("base 0: %s, want 0 (retry at once)", got)
	}
	if got := (RetrySchedule{Base: time.Hour, Max: 0}).Delay(30, high); got != MaxDelay {
		t.Errorf("max 0: %s, want MaxDelay", got)
	}
}

func TestRetryAfterAndLastErrorText(t *testing.T) {
	base := errors.New("boom")
	err := RetryAfter(base, 3*time.Second)
	if !errors.Is(err, base) || err.Error() != "boom" {
		t.Fatalf("RetryAfter hides its error: %v", err)
	}
	if d, ok := retryAfterOf(err); !ok || d != 3*time.Second {
		t.Fatalf("retryAfterOf = %s, %v", d, ok)
	}
	if d, _ := retryAfterOf(RetryAfter(base, -time.Second)); d != 0 {
		t.Errorf("negative RetryAfter gives %s, want 0", d)
	}
	if d, _ := retryAfterOf(RetryAfter(base, 100*time.Hour)); d != MaxDelay {
		t.Errorf("huge RetryAfter gives %s, want MaxDelay", d)
	}
	if _, ok := retryAfterOf(base); ok {
		t.Error("a plain error chose a delay")
	}
	long := errors.New(strings.Repeat("é", 1000))
	got := lastErrorText(long)
	if len(got) > MaxLastErrorBytes || !strings.HasSuffix(got, "...") || !strings.HasPrefix(got, "é") {
		t.Errorf("lastErrorText: %d bytes %q...", len(got), got[:10])
	}
	for _, r := range got {
		if r == '\uFFFD' {
			t.Fatal("lastErrorText cut a rune")
		}
	}
}
