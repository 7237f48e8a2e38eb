package queue

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/localcloud/localcloud/bindings"
)

// Defaults and limits of Consume's retry back-off and of idempotent sends.
const (
	// DefaultRetryDelay is the delay before a failed message's second
	// delivery (WithRetryDelay, the binding's retryDelay).
	DefaultRetryDelay = time.Second
	// DefaultMaxRetryDelay caps the doubling (WithMaxRetryDelay, the
	// binding's maxRetryDelay).
	DefaultMaxRetryDelay = 5 * time.Minute
	// RetryJitter is the relative jitter of every retry delay: +-20%.
	RetryJitter = 0.2
	// MaxLastErrorBytes bounds the error text kept with a failed message.
	MaxLastErrorBytes = 1024
)

// RetrySchedule is the back-off of Consume's failed handlers: the delay
// after a failed delivery number attempt (1 for the first) is
// Base*2^(attempt-1), jittered by +-RetryJitter and capped at Max.
type RetrySchedule struct {
	Base, Max time.Duration
}

// Delay returns the delay after failed delivery attempt; rnd returns a
// number in [0, 1) (rand.Float64, or a fixed value in tests). The result is
// never above Max nor above MaxDelay, and 0 when Base is 0.
func (s RetrySchedule) Delay(attempt int, rnd func() float64) time.Duration {
	if s.Base <= 0 {
		return 0
	}
	limit := min(s.Max, MaxDelay)
	if limit <= 0 {
		limit = MaxDelay
	}
	d := float64(s.Base)
	for i := 1; i < attempt && d < float64(limit)*2; i++ {
		d *= 2
	}
	d *= 1 - RetryJitter + 2*RetryJitter*rnd()
	if d >= float64(limit) {
		return limit
	}
	return time.Duration(d)
}

func defaultRand() float64 { return rand.Float64() }

// retryAfterError is the error of RetryAfter.
type retryAfterError struct {
	err   error
	delay time.Duration
}

func (e *retryAfterError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("retry after %s", e.delay)
	}
	return e.err.Error()
}

func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter wraps a handler's error so that Consume makes its message due
// again d from now (0..MaxDelay; outside that range it is clamped) instead
// of after the binding's back-off. errors.Is and errors.As see err through
// it.
func RetryAfter(err error, d time.Duration) error {
	return &retryAfterError{err: err, delay: d}
}

// retryAfterOf returns the delay a handler chose with RetryAfter.
func retryAfterOf(err error) (time.Duration, bool) {
	var ra *retryAfterError
	if !errors.As(err, &ra) {
		return 0, false
	}
	return min(max(ra.delay, 0), MaxDelay), true
}

// lastErrorText is err's text cut to MaxLastErrorBytes on a UTF-8
// boundary.
func lastErrorText(err error) string {
	s := err.Error()
	if len(s) <= MaxLastErrorBytes {
		return s
	}
	n := MaxLastErrorBytes - len("...")
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "..."
}

func validRetry(field string, d time.Duration) error {
	if d < 0 || d > MaxDelay {
		return bindings.Errorf(bindings.CodeInvalidInput, "%s: must be between 0s and %s, got %s", field, MaxDelay, d)
	}
	return nil
}
