package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
)

// deliveryAppMain runs the app programs of this file.
func deliveryAppMain(mode string) (code int, ok bool) {
	switch mode {
	case "always-fail":
		return alwaysFail(), true
	case "dedup-sender":
		return dedupSender(), true
	}
	return 0, false
}

// alwaysFail consumes the binding "jobs" with a handler that always fails,
// printing "attempt N at UNIXNANO" on stderr for each delivery, until SIGTERM. It
// sets no logger: Consume's failures go to slog.Default (stderr).
func alwaysFail() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	q, err := queue.FromEnv(ctx, "jobs")
	if err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		return 3
	}
	defer q.Close()
	err = q.Consume(ctx, func(_ context.Context, m queue.Message) error {
		fmt.Fprintf(os.Stderr, "attempt %d at %d\n", m.Attempt, time.Now().UnixNano())
		return fmt.Errorf("boom on attempt %d", m.Attempt)
	}, queue.ConsumePollInterval(5*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		return 4
	}
	return 0
}

// dedupSender sends k0000..k0999 to the binding "ids", each with its key as
// dedup key, starting at the offset in E2E_OFFSET, and prints how many
// were duplicates.
func dedupSender() int {
	ctx := context.Background()
	q, err := queue.FromEnv(ctx, "ids")
	if err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		return 3
	}
	defer q.Close()
	off, _ := strconv.Atoi(os.Getenv("E2E_OFFSET"))
	dups := 0
	for i := range 1000 {
		k := fmt.Sprintf("k%04d", (i+off)%1000)
		var r queue.SendResult
		if err := q.Send(ctx, queue.Text(k), queue.WithDedupKey(k), queue.WithSendResult(&r)); err != nil {
			fmt.Fprintln(os.Stderr, "app:", err)
			return 4
		}
		if r.Duplicate[0] {
			dups++
		}
	}
	fmt.Printf("duplicates %d\n", dups)
	return 0
}

// TestRetryBackoffDeadLetterAndDefaultLog: a handler that always fails, in
// an app under localcloud run, with maxAttempts 4 and retryDelay 200ms from
// the stack file: attempts about 200, 400, 800 ms apart, the message in the
// DLQ with the handler's last error, every failure in the app's log.
func TestRetryBackoffDeadLetterAndDefaultLog(t *testing.T) {
	t.Parallel()
	s := newStack(t, "  jobs:\n    type: queue\n    maxAttempts: 4\n    deadLetter: jobs-dlq\n    retryDelay: 200ms\n  jobs-dlq:\n    type: queue\n")
	if code, _, stderr := runCLI(t, "queue", "send", "-f", s.file, "jobs", "work"); code != 0 {
		t.Fatal(stderr)
	}
	cmd := exec.Command(binary, "run", "-f", s.file, "--", os.Args[0], "-test.run=^$")
	cmd.Env = environ(envAppMode + "=always-fail")
	p := startCmd(t, cmd)
	var at []int64
	for n := 1; n <= 4; n++ {
		line := p.waitLine(0, eventTimeout, fmt.Sprintf("attempt %d at ", n))
		ns, err := strconv.ParseInt(strings.TrimSpace(line[strings.LastIndex(line, " ")+1:]), 10, 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		at = append(at, ns)
	}
	var dl struct {
		Messages []struct {
			LastError *string `json:"lastError"`
			Origin    *struct {
				Attempts int `json:"attempts"`
			} `json:"origin"`
		} `json:"messages"`
	}
	deadline := time.Now().Add(eventTimeout)
	for {
		_, out, _ := runCLI(t, "queue", "peek", "-f", s.file, "jobs-dlq", "--json")
		if err := json.Unmarshal([]byte(out), &dl); err == nil && len(dl.Messages) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no dead letter: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.signal(syscall.SIGTERM)
	p.waitExit(eventTimeout)
	m := dl.Messages[0]
	if m.LastError == nil || *m.LastError != "boom on attempt 4" || m.Origin == nil || m.Origin.Attempts != 4 {
		t.Errorf("dead letter %+v (lastError %v); want lastError %q after 4 attempts", m, m.LastError, "boom on attempt 4")
	}
	for i, base := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond} {
		gap := time.Duration(at[i+1] - at[i])
		t.Logf("gap between attempts %d and %d: %s (schedule %s +-20%%)", i+1, i+2, gap, base)
		// Loose: the jitter's low end minus clock rounding; the high end
		// plus room for a loaded machine.
		if gap < base*8/10-5*time.Millisecond || gap > base*12/10+time.Second {
			t.Errorf("attempts %d and %d are %s apart; want about %s (+-20%%)", i+1, i+2, gap, base)
		}
	}
	log := p.stderr()
	for n := 1; n <= 4; n++ {
		want := []string{"handler failed", "binding=jobs", fmt.Sprintf("attempt=%d", n), "next_delay=", fmt.Sprintf(`err="boom on attempt %d"`, n)}
		found := false
		for _, line := range strings.Split(log, "\n") {
			if containsAll(line, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("the app's log lacks a line with %q:\n%s", want, log)
		}
	}
}

// TestDedupAcrossProcessesRestartsAndWindow: two processes sending the same
// 1,000 keys at once store 1,000 messages; a send from a new process (a
// restart) within the window stores nothing; after the window it stores
// one.
func TestDedupAcrossProcessesRestartsAndWindow(t *testing.T) {
	t.Parallel()
	s := newStack(t, "  ids:\n    type: queue\n  late:\n    type: queue\n    dedupWindow: 2s\n")
	// The store exists before the senders start: two processes creating
	// one store at the same instant can meet SQLITE_BUSY in the open
	// handshake, which is not what this test is about.
	q, err := queue.Open(context.Background(), filepath.Join(s.dataDir(), "queue", "ids"))
	if err != nil {
		t.Fatal(err)
	}
	_ = q.Close()
	var ps []*proc
	for _, off := range []string{"0", "500"} {
		cmd := exec.Command(binary, "run", "-f", s.file, "--", os.Args[0], "-test.run=^$")
		cmd.Env = environ(envAppMode+"=dedup-sender", "E2E_OFFSET="+off)
		ps = append(ps, startCmd(t, cmd))
	}
	dups := 0
	for _, p := range ps {
		if code := p.waitExit(60 * time.Second); code != 0 {
			t.Fatalf("sender exit %d: %s", code, p.stderr())
		}
		var n int
		if _, err := fmt.Sscanf(p.stdout.String(), "duplicates %d", &n); err != nil {
			t.Fatalf("sender output %q: %v", p.stdout.String(), err)
		}
		dups += n
	}
	var st struct {
		Total int64 `json:"total"`
	}
	_, out, _ := runCLI(t, "queue", "stats", "-f", s.file, "ids", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Total != 1000 || dups != 1000 {
		t.Fatalf("stored %d messages (%s), %d duplicates reported; want 1000 and 1000", st.Total, out, dups)
	}

	send := func() string {
		t.Helper()
		code, out, stderr := runCLI(t, "queue", "send", "-f", s.file, "late", "once", "--dedup-key", "order:1", "--json")
		if code != 0 {
			t.Fatalf("send: %d %s", code, stderr)
		}
		var r struct {
			Duplicate bool `json:"duplicate"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return strconv.FormatBool(r.Duplicate)
	}
	first := time.Now()
	if d := send(); d != "false" {
		t.Fatal("the first keyed send was a duplicate")
	}
	if d := send(); d != "true" && time.Since(first) < 2*time.Second {
		t.Fatal("a send from a new process within the window stored a message")
	}
	time.Sleep(time.Until(first.Add(2100 * time.Millisecond)))
	if d := send(); d != "false" {
		t.Fatal("a send after the window was a duplicate")
	}
	_, out, _ = runCLI(t, "queue", "stats", "-f", s.file, "late", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Total != 2 {
		t.Fatalf("late: %d messages (%s); want 2", st.Total, out)
	}
}
