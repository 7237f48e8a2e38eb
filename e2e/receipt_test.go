package e2e

import (
	"strings"
	"testing"
)

// TestAckNackOfReceiptsNeverIssued runs queue ack and nack with strings the
// store never issued: an upper-case copy of a real receipt, junk, a receipt
// with a leading zero. The library treats them as no-ops (the format says
// so); the CLI must not report an ack or nack that did not happen: it
// exits 1, says on stderr that nothing was done, marks them ok=false in
// --json, and the message stays in flight. The real receipt then works.
func TestAckNackOfReceiptsNeverIssued(t *testing.T) {
	t.Parallel()
	s := newStack(t, opsBindings)
	f := []string{"-f", s.file}
	run := func(args ...string) string { t.Helper(); return lcOK(t, nil, append(args, f...)...) }

	run("queue", "send", "orders", "first")
	var got queueMsgsOut
	decode(t, "queue receive", run("queue", "receive", "orders", "--visibility", "1m", "--json"), &got)
	if len(got.Messages) != 1 {
		t.Fatalf("receive: %+v", got)
	}
	receipt := got.Messages[0].Receipt
	id, uuidPart, _ := strings.Cut(receipt, ":")
	never := []struct{ receipt, why string }{
		{id + ":" + strings.ToUpper(uuidPart), "lower case"},
		{"not-a-receipt", `"{id}:{uuid}"`},
		{"0" + receipt, "leading zero"},
	}
	inFlight := func(when string) {
		t.Helper()
		var st queueStatsOut
		decode(t, "queue stats", run("queue", "stats", "orders", "--json"), &st)
		if st.InFlight != 1 || st.Total != 1 {
			t.Fatalf("%s: stats %+v, want the message still in flight", when, st)
		}
	}
	for _, op := range []string{"ack", "nack"} {
		for _, n := range never {
			code, stdout, stderr := lc(t, nil, append([]string{"queue", op, "orders", n.receipt}, f...)...)
			if code != 1 {
				t.Errorf("%s %s: exit %d, want 1", op, n.receipt, code)
			}
			if strings.Contains(stdout, op+"ed") {
				t.Errorf("%s %s: stdout reports it done: %q", op, n.receipt, stdout)
			}
			want := []string{"Error: ", n.receipt, "not a receipt this store issues", n.why, "nothing " + op + "ed"}
			if !containsAll(stderr, want) {
				t.Errorf("%s %s: stderr lacks %q:\n%s", op, n.receipt, want, stderr)
			}
			var res receiptsOut
			code, stdout, _ = lc(t, nil, append([]string{"queue", op, "orders", n.receipt, "--json"}, f...)...)
			decode(t, "queue "+op, stdout, &res)
			if code != 1 || len(res.Results) != 1 || res.Results[0].OK {
				t.Errorf("%s %s --json: exit %d, %+v; want exit 1 and ok false", op, n.receipt, code, res)
			}
			inFlight(op + " " + n.receipt)
		}
	}

	// A batch with one receipt never issued: the real one is acked, the
	// other reported, exit 1.
	code, stdout, stderr := lc(t, nil, append([]string{"queue", "ack", "orders", receipt, never[0].receipt}, f...)...)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "acked "+receipt) || !strings.Contains(stderr, "nothing acked") {
		t.Errorf("ack of a real and an upper-case receipt: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var st queueStatsOut
	decode(t, "queue stats", run("queue", "stats", "orders", "--json"), &st)
	if st.Total != 0 {
		t.Errorf("after the ack of the real receipt: stats %+v, want empty", st)
	}
}
