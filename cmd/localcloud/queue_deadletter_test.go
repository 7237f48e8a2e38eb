package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/internal/testutil"
)

// TestQueueDelayExtendRedriveInProcess: send --delay, nack --delay and
// extend from the command line; receive applies the stack's dead-letter
// policy; peek and stats show the origin and the counts; redrive brings
// the dead letters back.
func TestQueueDelayExtendRedriveInProcess(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, `version: 1
name: shop
bindings:
  orders:
    type: queue
    maxAttempts: 1
    deadLetter: orders-dlq
  orders-dlq:
    type: queue
  other:
    type: queue
`)
	run := func(args ...string) (int, string, string) {
		code, out, errOut := runIn(t, nil, append([]string{"queue"}, append(args, "-f", stack)...)...)
		return code, string(out), errOut
	}
	mustJSON := func(out string, v any) {
		t.Helper()
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}

	// A delayed send is not due yet.
	if code, out, stderr := run("send", "orders", "later", "--delay", "1h"); code != 0 || out != "" || !strings.Contains(stderr, "due in 1h0m0s") {
		t.Fatalf("send --delay: %d %s %s", code, out, stderr)
	}
	var peek queuePeekJSON
	_, out, _ := run("peek", "orders", "--json")
	mustJSON(out, &peek)
	if len(peek.Messages) != 1 || peek.Messages[0].State != stateDelayed {
		t.Fatalf("peek after a delayed send: %s", out)
	}
	if code, _, stderr := run("send", "orders", "x", "--delay", "-1s"); code != exitUsage || !strings.Contains(stderr, "delay") {
		t.Errorf("send --delay -1s: %d %s", code, stderr)
	}
	if code, _, stderr := run("purge", "orders", "--yes"); code != 0 {
		t.Fatal(stderr)
	}

	// Receive, extend, nack with a back-off.
	if code, _, stderr := run("send", "orders", "poison"); code != 0 {
		t.Fatal(stderr)
	}
	var recv queueReceiveJSON
	_, out, _ = run("receive", "orders", "--json", "--visibility", "1s")
	mustJSON(out, &recv)
	if len(recv.Messages) != 1 {
		t.Fatalf("receive: %s", out)
	}
	receipt := recv.Messages[0].Receipt
	var ext queueExtendJSON
	code, out, stderr := run("extend", "orders", receipt, "10m", "--json")
	if code != 0 {
		t.Fatalf("extend: %d %s", code, stderr)
	}
	mustJSON(out, &ext)
	if ext.Receipt != receipt || ext.VisibleUntil == "" {
		t.Errorf("extend: %s", out)
	}
	if code, _, stderr := run("extend", "orders", receipt, "soon"); code != exitUsage || !strings.Contains(stderr, "not a duration") {
		t.Errorf("extend with a bad duration: %d %s", code, stderr)
	}
	if code, _, stderr := run("extend", "orders", "junk", "1m"); code != exitUsage || !strings.Contains(stderr, "receipt") {
		t.Errorf("extend of a junk receipt: %d %s", code, stderr)
	}
	if code, _, stderr := run("nack", "orders", receipt, "--delay", "13h"); code != exitUsage || !strings.Contains(stderr, "--delay") {
		t.Errorf("nack --delay 13h: %d %s", code, stderr)
	}
	if code, _, stderr := run("nack", "orders", receipt, "--delay", "1ms"); code != 0 {
		t.Fatalf("nack --delay: %s", stderr)
	}
	// maxAttempts 1: once due again, the next receive moves it to the DLQ.
	testutil.CheckFor(t, 10*time.Second, time.Millisecond, "the back-off to pass", func() bool {
		_, out, _ := run("stats", "orders", "--json")
		var st queueStatsJSON
		mustJSON(out, &st)
		return st.Due == 1
	})
	_, out, _ = run("receive", "orders", "--json")
	mustJSON(out, &recv)
	if len(recv.Messages) != 0 {
		t.Fatalf("receive past maxAttempts delivered: %s", out)
	}
	if code, _, stderr := run("send", "orders-dlq", "sent-directly"); code != 0 {
		t.Fatal(stderr)
	}
	_, out, _ = run("peek", "orders-dlq", "--json")
	mustJSON(out, &peek)
	if len(peek.Messages) != 2 || peek.Messages[0].Origin == nil || peek.Messages[0].Origin.Binding != "orders" ||
		peek.Messages[0].Origin.Attempts != 1 || peek.Messages[0].Origin.LastReceipt != receipt || peek.Messages[1].Origin != nil {
		t.Fatalf("peek of the DLQ: %s", out)
	}
	if _, out, _ := run("peek", "orders-dlq"); !strings.Contains(out, "ORIGIN") || !strings.Contains(out, "orders#") {
		t.Errorf("peek text lacks the origin:\n%s", out)
	}
	var st queueStatsJSON
	_, out, _ = run("stats", "orders-dlq", "--json")
	mustJSON(out, &st)
	if st.DeadLetters != 1 || len(st.Origins) != 1 || st.Origins[0].Binding != "orders" || st.Total != 2 {
		t.Fatalf("stats of the DLQ: %s", out)
	}
	if _, out, _ := run("stats", "orders-dlq"); !strings.Contains(out, "1 dead letter: 1 from orders") {
		t.Errorf("stats text:\n%s", out)
	}

	// Redrive: the dead letter goes home; the direct one needs --to.
	var rd queueRedriveJSON
	code, out, stderr = run("redrive", "orders-dlq", "--json")
	if code != 0 {
		t.Fatalf("redrive: %d %s", code, stderr)
	}
	mustJSON(out, &rd)
	if rd.Moved != 1 || rd.Skipped != 1 {
		t.Fatalf("redrive: %s", out)
	}
	_, out, _ = run("receive", "orders", "--json")
	mustJSON(out, &recv)
	if len(recv.Messages) != 1 || recv.Messages[0].Payload != "poison" || recv.Messages[0].Attempt != 1 {
		t.Fatalf("receive after redrive: %s", out)
	}
	if code, _, stderr := run("redrive", "orders-dlq", "--to", "orders-dlq"); code != exitUsage {
		t.Errorf("redrive --to itself: %d %s", code, stderr)
	}
	if code, _, stderr := run("redrive", "orders-dlq", "--to", "nope"); code != 1 || !strings.Contains(stderr, "nope") {
		t.Errorf("redrive --to unknown: %d %s", code, stderr)
	}
	code, out, stderr = run("redrive", "orders-dlq", "--to", "other", "--max", "5")
	if code != 0 || !strings.Contains(stderr, "redrove 1 message from orders-dlq to other") {
		t.Fatalf("redrive --to other: %d %s %s", code, out, stderr)
	}
	_, out, _ = run("receive", "other", "--json")
	mustJSON(out, &recv)
	if len(recv.Messages) != 1 || recv.Messages[0].Payload != "sent-directly" {
		t.Fatalf("receive from other: %s", out)
	}
}
