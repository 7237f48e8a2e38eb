package jsengine_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// openDriver opens the engine's driver queue name on nc.
func openDriver(t *testing.T, nc *nats.Conn, name string, dl driver.DeadLetter) driver.Queue {
	t.Helper()
	q, err := jsengine.QueueEngine{Conn: nc}.Open(context.Background(), driver.Config{Location: name, BindingName: "b",
		Clock: time.Now, Logger: slog.Default(), DeadLetter: dl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

func receiveOneDrv(t *testing.T, q driver.Queue) driver.Message {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		ms, err := q.Receive(bg, 1, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 1 {
			return ms[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("no message received in 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func nackFailed(t *testing.T, q driver.Queue, receipt, text string) error {
	t.Helper()
	fr, ok := q.(driver.FailureRecorder)
	if !ok {
		t.Fatal("the jetstream queue is no driver.FailureRecorder")
	}
	return fr.NackFailed(bg, receipt, 0, text)
}

func peekDrv(t *testing.T, q driver.Queue) []driver.PeekedMessage {
	t.Helper()
	ms, err := q.Peek(bg, 100)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// errEntries is how many entries the side stream of queue name holds (-1:
// no side stream).
func errEntries(t *testing.T, nc *nats.Conn, name string) int {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(bg, "LCQE_"+name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(bg)
	if err != nil {
		t.Fatal(err)
	}
	return int(info.State.Msgs)
}

// TestLastErrorKeptReplacedCleared: a failure's text is shown by Peek, also
// through another connection and handle; a later failure replaces it (one
// entry per message); a stale receipt records nothing; the ack removes the
// entry. The side stream's bound is its configuration.
func TestLastErrorKeptReplacedCleared(t *testing.T) {
	nc := connect(t)
	name := freshName("le")
	q := openDriver(t, nc, name, driver.DeadLetter{})
	if _, err := q.Send(bg, []driver.Payload{{Type: "text", Data: "a"}}, 0); err != nil {
		t.Fatal(err)
	}
	if n := errEntries(t, nc, name); n != -1 {
		t.Fatalf("side stream exists before any failure (%d entries)", n)
	}
	m1 := receiveOneDrv(t, q)
	if err := nackFailed(t, q, m1.ReceiptHandle, "boom 1"); err != nil {
		t.Fatal(err)
	}
	if got := peekDrv(t, q); len(got) != 1 || got[0].LastError != "boom 1" {
		t.Fatalf("peek after the failure: %+v; want LastError %q", got, "boom 1")
	}
	m2 := receiveOneDrv(t, q)
	if m2.Attempt != 2 {
		t.Fatalf("second delivery attempt %d", m2.Attempt)
	}
	// The first receipt is stale now: it records nothing.
	if err := nackFailed(t, q, m1.ReceiptHandle, "stale"); !errors.Is(err, driver.ErrStaleReceipt) {
		t.Fatalf("NackFailed with a stale receipt: %v; want ErrStaleReceipt", err)
	}
	if err := nackFailed(t, q, m2.ReceiptHandle, "boom 2\nsecond line"); err != nil {
		t.Fatal(err)
	}
	if n := errEntries(t, nc, name); n != 1 {
		t.Fatalf("side stream holds %d entries for one message; want 1", n)
	}
	other := openDriver(t, connect(t), name, driver.DeadLetter{})
	if got := peekDrv(t, other); len(got) != 1 || got[0].LastError != "boom 2\nsecond line" {
		t.Fatalf("peek through another connection: %+v", got)
	}
	m3 := receiveOneDrv(t, other)
	if err := other.Ack(bg, m3.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	if n := errEntries(t, nc, name); n != 0 {
		t.Fatalf("side stream holds %d entries after the ack; want 0", n)
	}
	js, _ := jetstream.New(nc)
	st, err := js.Stream(bg, "LCQE_"+name)
	if err != nil {
		t.Fatal(err)
	}
	c := st.CachedInfo().Config
	if c.MaxMsgsPerSubject != 1 || c.MaxAge != 7*24*time.Hour || c.Retention != jetstream.LimitsPolicy || c.AllowDirect {
		t.Fatalf("side stream config: per subject %d, max age %s, retention %s, direct %v",
			c.MaxMsgsPerSubject, c.MaxAge, c.Retention, c.AllowDirect)
	}
}

// TestLastErrorIntoDeadLetterAndPurge: a move carries the last error into
// the dead letter (line breaks and % intact) and removes the source's
// entry; Purge empties the side stream.
func TestLastErrorIntoDeadLetterAndPurge(t *testing.T) {
	nc := connect(t)
	name := freshName("led")
	q := openDriver(t, nc, name, driver.DeadLetter{MaxAttempts: 1, Location: name + "-dlq"})
	dlq := openDriver(t, nc, name+"-dlq", driver.DeadLetter{})
	if _, err := q.Send(bg, []driver.Payload{{Type: "text", Data: "poison"}, {Type: "text", Data: "other"}}, 0); err != nil {
		t.Fatal(err)
	}
	text := "failed: 100% broken\r\nat line 2\x7f"
	for _, want := range []string{text, "other failed"} {
		m := receiveOneDrv(t, q)
		if m.Payload.Data == "other" {
			want = "other failed"
		}
		if err := nackFailed(t, q, m.ReceiptHandle, want); err != nil {
			t.Fatal(err)
		}
	}
	// Both are spent: a receive moves them.
	waitUntil(t, "both moved to the dead-letter queue", func() bool {
		if _, err := q.Receive(bg, 10, time.Second); err != nil {
			t.Fatal(err)
		}
		return len(peekDrv(t, dlq)) == 2
	})
	for _, dm := range peekDrv(t, dlq) {
		want := text
		if dm.Payload.Data == "other" {
			want = "other failed"
		}
		if dm.LastError != want || dm.Origin == nil || dm.Origin.Attempts != 1 {
			t.Fatalf("dead letter %q: LastError %q, origin %+v; want %q", dm.Payload.Data, dm.LastError, dm.Origin, want)
		}
	}
	if n := errEntries(t, nc, name); n != 0 {
		t.Fatalf("source side stream holds %d entries after the moves; want 0", n)
	}
	// A failure in the dead-letter queue shows over the carried text.
	m := receiveOneDrv(t, dlq)
	if err := nackFailed(t, dlq, m.ReceiptHandle, "failed again"); err != nil {
		t.Fatal(err)
	}
	for _, pm := range peekDrv(t, dlq) {
		if pm.ID == m.ID && pm.LastError != "failed again" {
			t.Fatalf("dead letter's LastError after its own failure: %q", pm.LastError)
		}
	}
	if err := dlq.Purge(bg); err != nil {
		t.Fatal(err)
	}
	if n := errEntries(t, nc, name+"-dlq"); n != 0 {
		t.Fatalf("side stream holds %d entries after Purge; want 0", n)
	}
}

// TestLastErrorForeignEntries: entries and headers another program wrote
// are untrusted: an entry of another incarnation of the stream is ignored,
// an oversized one is cut, an unescapable header is shown as it is, and
// none fails Peek.
func TestLastErrorForeignEntries(t *testing.T) {
	nc := connect(t)
	name := freshName("lef")
	q := openDriver(t, nc, name, driver.DeadLetter{})
	if _, err := q.Send(bg, []driver.Payload{{Type: "text", Data: "a"}, {Type: "text", Data: "b"}}, 0); err != nil {
		t.Fatal(err)
	}
	m := receiveOneDrv(t, q)
	if err := nackFailed(t, q, m.ReceiptHandle, "ours"); err != nil { // creates the side stream
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	peeked := peekDrv(t, q)
	if len(peeked) != 2 {
		t.Fatalf("peek: %d messages", len(peeked))
	}
	var otherID int64
	for _, pm := range peeked {
		if pm.ID != m.ID {
			otherID = pm.ID
		}
	}
	wrong := natsMsg("lcqe."+name+"."+itoa(m.ID), "from an older stream")
	wrong.Header.Set("Lc-Stream-Created", "12345")
	if _, err := js.PublishMsg(bg, wrong); err != nil {
		t.Fatal(err)
	}
	// An oversized entry for the other message, with the right incarnation.
	st, _ := js.Stream(bg, "LCQ_"+name)
	big := natsMsg("lcqe."+name+"."+itoa(otherID), strings.Repeat("é", 2000))
	big.Header.Set("Lc-Stream-Created", itoa(st.CachedInfo().Created.UnixNano()))
	if _, err := js.PublishMsg(bg, big); err != nil {
		t.Fatal(err)
	}
	for _, pm := range peekDrv(t, q) {
		switch pm.ID {
		case m.ID:
			if pm.LastError != "" {
				t.Fatalf("an entry of another stream incarnation shown: %q", pm.LastError)
			}
		case otherID:
			if len(pm.LastError) > 1024 || !strings.HasSuffix(pm.LastError, "...") || !strings.HasPrefix(pm.LastError, "éé") {
				t.Fatalf("oversized foreign entry shown as %d bytes %.20q", len(pm.LastError), pm.LastError)
			}
		}
	}
	// A dead letter's header that is no escape of ours.
	dlq := openDriver(t, nc, freshName("lefd"), driver.DeadLetter{})
	raw := natsMsg("lcq."+dlq.Location(), "x")
	raw.Header.Set("Lc-Type", "text")
	raw.Header.Set("Lc-Origin-Store", "elsewhere")
	raw.Header.Set("Lc-Origin-Last-Error", "50%-off %zz")
	if _, err := js.PublishMsg(bg, raw); err != nil {
		t.Fatal(err)
	}
	if got := peekDrv(t, dlq); len(got) != 1 || got[0].LastError != "50%-off %zz" {
		t.Fatalf("peek of a foreign dead letter: %+v", got)
	}
}

// TestLastErrorSurvivesRestart: the entry is in the server's file store: a
// server restarted on the same store directory still shows it.
func TestLastErrorSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true, JetStream: true, StoreDir: dir}
	start := func() *server.Server {
		srv, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatal("server not ready")
		}
		return srv
	}
	srv := start()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	q := openDriver(t, nc, "restart", driver.DeadLetter{})
	if _, err := q.Send(bg, []driver.Payload{{Type: "text", Data: "a"}}, 0); err != nil {
		t.Fatal(err)
	}
	m := receiveOneDrv(t, q)
	if err := nackFailed(t, q, m.ReceiptHandle, "before the restart"); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	srv.Shutdown()
	srv.WaitForShutdown()
	srv = start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	nc2, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	var got []driver.PeekedMessage
	waitUntil(t, "the queue readable after the restart", func() bool {
		q2, err := jsengine.QueueEngine{Conn: nc2}.Open(bg, driver.Config{Location: "restart", Clock: time.Now, Logger: slog.Default()})
		if err != nil {
			return false
		}
		defer q2.Close()
		got, err = q2.Peek(bg, 10)
		return err == nil
	})
	if len(got) != 1 || got[0].LastError != "before the restart" {
		t.Fatalf("peek after the restart: %+v", got)
	}
	_ = os.RemoveAll(dir)
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
