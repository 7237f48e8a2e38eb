package sqlitequeue_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
)

const aliasHelperEnv = "LOCALCLOUD_TEST_ALIAS_QUEUE"

// TestDeadLetterAliasRefusedInAnotherProcess: an app process opens a queue
// whose dead-letter queue is a symlink to the queue itself (maxAttempts 1,
// so every claim of a spent message would move it into itself with its
// attempts reset, forever). The open is refused in that process, and the
// message sent before stays where it was, never delivered or moved.
func TestDeadLetterAliasRefusedInAnotherProcess(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	q := filepath.Join(base, "orders")
	h := openFile(t, q)
	if err := h.Send(t.Context(), queue.Text("once")); err != nil {
		t.Fatal(err)
	}
	h.Close()
	alias := filepath.Join(base, "orders-dlq")
	if err := os.Symlink(q, alias); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAliasHelperProcess$", "-test.count=1", "-test.timeout=1m")
	cmd.Env = append(os.Environ(), aliasHelperEnv+"="+q+string(os.PathListSeparator)+alias)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "refused: ") || !strings.Contains(string(out), alias) {
		t.Fatalf("helper output %q: want the open refused, naming %s", out, alias)
	}
	// Nothing was claimed or moved.
	h = openFile(t, q)
	msgs, err := h.Peek(t.Context(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].Attempt != 0 || msgs[0].Payload.Data != "once" || msgs[0].Origin != nil {
		t.Fatalf("queue after the refused open: %+v; want the one message, attempt 0, never moved", msgs)
	}
}

// TestAliasHelperProcess is not a test: re-executed by
// TestDeadLetterAliasRefusedInAnotherProcess, it opens the queue with the
// alias as its dead-letter queue. Refused, it prints "refused: ERR"; opened,
// it receives for a second and prints how many deliveries it saw.
func TestAliasHelperProcess(t *testing.T) {
	env := os.Getenv(aliasHelperEnv)
	if env == "" {
		t.Skip("helper process of TestDeadLetterAliasRefusedInAnotherProcess; runs only when re-executed")
	}
	q, alias, _ := strings.Cut(env, string(os.PathListSeparator))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := openQueue(ctx, q, queue.WithDeadLetter(1, alias))
	if err != nil {
		fmt.Println("refused:", err)
		os.Exit(0)
	}
	defer h.Close()
	deliveries := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		msgs, err := h.Receive(ctx, 1, queue.ReceiveVisibility(time.Millisecond))
		if err != nil {
			fmt.Println("receive:", err)
			os.Exit(1)
		}
		deliveries += len(msgs)
	}
	fmt.Println("opened; deliveries:", deliveries)
	os.Exit(0)
}
