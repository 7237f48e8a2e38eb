package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/notify"
)

// Test-only bridges for the external tests in package queue_test (which can
// import internal/hintsrc; this package cannot).

// ExportWithoutLocalWake stops a handle's Send and Nack from waking waiters
// of this process directly, so only NATS hints and polls wake them: the path
// a consumer in another process takes.
func ExportWithoutLocalWake() Option { return func(o *options) { o.wake.noLocalWake = true } }

// ExportHintWakes returns how many hints (and reconnections) the handle's
// shared subscription has seen, making the subscription if needed.
func ExportHintWakes(q *Queue) uint64 {
	if s := q.hints.subscription(); s != nil {
		return s.wakes.Load()
	}
	return 0
}

// ExportWaiting returns how many ReceiveWait and Consume goroutines of the
// handle are blocked waiting for a wake-up.
func ExportWaiting(q *Queue) int { return int(q.hints.waiting.Load()) }

// ExportHintStats returns the counters of the handle's shared publisher.
func ExportHintStats(q *Queue) notify.PublisherStats {
	if q.hints.pub == nil {
		return notify.PublisherStats{}
	}
	return q.hints.pub.stats()
}

func TestBroadcasterWakesAllWaitersOnce(t *testing.T) {
	t.Parallel()
	var b broadcaster
	b.broadcast() // nobody waiting: nothing to close
	a, c := b.wait(), b.wait()
	if a != c {
		t.Fatal("two waiters before a broadcast got different channels")
	}
	b.broadcast()
	for _, ch := range []<-chan struct{}{a, c} {
		select {
		case <-ch:
		default:
			t.Fatal("waiter not woken by broadcast")
		}
	}
	next := b.wait()
	select {
	case <-next:
		t.Fatal("a channel taken after the broadcast is already closed")
	default:
	}
}

func TestLocalWakeGroupsByStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, other := t.TempDir(), t.TempDir()
	a := hwOpenInternal(t, dir)
	b := hwOpenInternal(t, dir)
	c := hwOpenInternal(t, other)
	if a.hints.local != b.hints.local {
		t.Fatal("two handles on one store do not share a wake group")
	}
	if a.hints.local == c.hints.local {
		t.Fatal("handles on different stores share a wake group")
	}
	lb, _ := b.hints.waitChans()
	lc, _ := c.hints.waitChans()
	if err := a.Send(ctx, Text("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lb:
	default:
		t.Fatal("Send did not wake a waiter on the same store")
	}
	select {
	case <-lc:
		t.Fatal("Send woke a waiter on another store")
	default:
	}
	_ = a.Close()
	_ = b.Close()
	_ = b.Close() // twice is fine
	locals.Lock()
	_, left := locals.m[a.Path()]
	locals.Unlock()
	if left {
		t.Fatal("wake group kept after its last handle closed")
	}
}

func TestSharedPublisherPerURLAndToken(t *testing.T) {
	t.Parallel()
	// Nothing listens on this URL: dialing must not block or fail.
	url := "nats://127.0.0.1:1"
	a := hwOpenInternal(t, t.TempDir(), WithHints(url, "tok", "localcloud.s.a.available"))
	b := hwOpenInternal(t, t.TempDir(), WithHints(url, "tok", "localcloud.s.b.available"))
	c := hwOpenInternal(t, t.TempDir(), WithHints(url, "other", "localcloud.s.c.available"))
	if a.hints.pub != b.hints.pub {
		t.Fatal("handles with the same URL and token do not share a publisher")
	}
	if a.hints.pub == c.hints.pub {
		t.Fatal("handles with different tokens share a publisher")
	}
	start := time.Now()
	if err := a.Send(context.Background(), Text("x")); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Send with NATS down took %s", d)
	}
	if st := ExportHintStats(b); st.Notified != 1 {
		t.Fatalf("shared publisher stats = %+v, want one Notify", st)
	}
	_ = a.Close()
	_ = b.Close()
	pubs.Lock()
	_, left := pubs.m[[2]string{url, "tok"}]
	pubs.Unlock()
	if left {
		t.Fatal("publisher kept after its last handle closed")
	}
}

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

func hwOpenInternal(t *testing.T, dir string, opts ...Option) *Queue {
	t.Helper()
	q, err := Open(context.Background(), dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}
