package supervisor

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/testutil"
	"github.com/localcloud/localcloud/notify"
)

// hintLog records every hint published on the supervisor's server.
type hintLog struct {
	mu    sync.Mutex
	hints []seenHint
}

type seenHint struct {
	subject string
	hint    notify.Hint
	at      time.Time
}

func watchAllHints(t *testing.T, url string) *hintLog {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	l := &hintLog{}
	if _, err := nc.Subscribe(notify.SubjectPrefix+".>", func(m *nats.Msg) {
		h, err := notify.ParseHint(m.Data)
		if err != nil {
			t.Errorf("bad hint %q on %s: %v", m.Data, m.Subject, err)
			return
		}
		l.mu.Lock()
		l.hints = append(l.hints, seenHint{m.Subject, h, time.Now()})
		l.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the server has the subscription
		t.Fatal(err)
	}
	return l
}

// since reports whether a hint with due == 1 arrived on subject at or
// after from.
func (l *hintLog) since(from time.Time, subject string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.hints {
		if h.subject == subject && !h.at.Before(from) && h.hint.Due == 1 {
			return true
		}
	}
	return false
}

// TestUpHintsFollowTheServedQueues: up's own handle writes without hinting
// (it has no WithHints), so every hint here comes from up's hint source. It
// must follow the queues through a reopen, a removal and re-adding, and a
// new stack name.
func TestUpHintsFollowTheServedQueues(t *testing.T) {
	t.Parallel()
	s, file, logs := start(t, stackText("  orders:\n    type: queue", "  carts:\n    type: kv"), Options{NoWatch: true})
	hints := watchAllHints(t, s.URL())

	// sendOne empties the queue, then sends one message through up's own
	// handle and waits for a hint with due 1 on subject.
	sendOne := func(step, subject string) {
		t.Helper()
		s.mu.Lock()
		q := s.stores["orders"].h.Queue()
		s.mu.Unlock()
		if err := q.Purge(ctx); err != nil {
			t.Fatal(err)
		}
		from := time.Now()
		if err := q.Send(ctx, queue.Text(step)); err != nil {
			t.Fatal(err)
		}
		testutil.CheckFor(t, 10*time.Second, 10*time.Millisecond, step+": a hint on "+subject, func() bool { return hints.since(from, subject) })
	}
	reload := func(text string) Diff {
		t.Helper()
		writeFile(t, file, text)
		d, err := s.Reload(ctx, "test")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	sendOne("start", "localcloud.shop.orders.available")

	if d := reload(stackText("  orders:\n    type: queue\n    durability: full", "  carts:\n    type: kv")); strings.Join(d.Reopened, ",") != "orders" {
		t.Fatalf("diff %+v, want orders reopened", d)
	}
	sendOne("reopened", "localcloud.shop.orders.available")

	if d := reload(stackText("  carts:\n    type: kv")); strings.Join(d.Removed, ",") != "orders" {
		t.Fatalf("diff %+v, want orders removed", d)
	}
	if d := reload(stackText("  orders:\n    type: queue", "  carts:\n    type: kv")); strings.Join(d.Added, ",") != "orders" {
		t.Fatalf("diff %+v, want orders added", d)
	}
	sendOne("re-added", "localcloud.shop.orders.available")

	renamed := strings.Replace(stackText("  orders:\n    type: queue", "  carts:\n    type: kv"), "name: shop", "name: depot", 1)
	if d := reload(renamed); !d.Renamed {
		t.Fatalf("diff %+v, want renamed", d)
	}
	sendOne("renamed", "localcloud.depot.orders.available")

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A binding that was not removed from the source before it was added
	// again, or a connection closed under it, would have been logged.
	for _, bad := range []string{"no hints from up", "hint source:"} {
		if strings.Contains(logs.String(), bad) {
			t.Errorf("log has %q:\n%s", bad, logs)
		}
	}
}
