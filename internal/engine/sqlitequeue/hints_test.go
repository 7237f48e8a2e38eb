package sqlitequeue

import (
	"context"
	"testing"
	"time"
)

// withHints is the engine's side of queue.WithHints.
func withHints(url, token, subject string) func(*options) {
	return func(o *options) { o.wake.url, o.wake.token, o.wake.subject = url, token, subject }
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
	if _, err := a.Send(ctx, []Payload{{Type: "text", Data: "x"}}, 0); err != nil {
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
	a := hwOpenInternal(t, t.TempDir(), withHints(url, "tok", "localcloud.s.a.available"))
	b := hwOpenInternal(t, t.TempDir(), withHints(url, "tok", "localcloud.s.b.available"))
	c := hwOpenInternal(t, t.TempDir(), withHints(url, "other", "localcloud.s.c.available"))
	if a.hints.pub != b.hints.pub {
		t.Fatal("handles with the same URL and token do not share a publisher")
	}
	if a.hints.pub == c.hints.pub {
		t.Fatal("handles with different tokens share a publisher")
	}
	start := time.Now()
	if _, err := a.Send(context.Background(), []Payload{{Type: "text", Data: "x"}}, 0); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Send with NATS down took %s", d)
	}
	if st := b.HintStats(); st.Notified != 1 {
		t.Fatalf("shared publisher stats = %+v, want one Notify", st)
	}
	_ = a.Close()
	_ = b.Close()
	pubs.Lock()
	_, left := pubs.m[[3]string{url, "tok", ""}]
	pubs.Unlock()
	if left {
		t.Fatal("publisher kept after its last handle closed")
	}
}

func hwOpenInternal(t *testing.T, dir string, opts ...func(*options)) *Queue {
	t.Helper()
	var o options
	for _, fn := range opts {
		fn(&o)
	}
	q, err := Open(context.Background(), dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}
