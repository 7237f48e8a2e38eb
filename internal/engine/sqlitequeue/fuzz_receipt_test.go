package sqlitequeue_test

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// receiptRule is what a store issues, written out on its own: the row id in
// decimal without sign or leading zero, ":", and a UUID in the canonical
// lower-case 8-4-4-4-12 form. The id must also fit an int64.
var receiptRule = regexp.MustCompile(`^[1-9][0-9]*:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func ruleAccepts(r string) bool {
	if !receiptRule.MatchString(r) {
		return false
	}
	id, _, _ := strings.Cut(r, ":")
	_, err := strconv.ParseInt(id, 10, 64)
	return err == nil
}

// FuzzReceipt checks receipt parsing against receiptRule, and that on a real
// store no receipt but the current one deletes, releases or extends a
// held message: Ack and Nack of a handle the store never issued are no-op
// successes, of an issued handle of the held message a stale-receipt error;
// Extend says INVALID_INPUT, stale or gone.
func FuzzReceipt(f *testing.F) {
	const u = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	for _, seed := range []string{
		"1:" + u, "2:" + u, "9223372036854775807:" + u, "9223372036854775808:" + u,
		"0:" + u, "-1:" + u, "+1:" + u, "01:" + u, " 1:" + u, "1:" + strings.ToUpper(u), "1: " + u,
		"1:" + u[:35], "1:" + u + "0", "1:" + strings.ReplaceAll(u, "-", ""), "1:{" + u + "}", "1:urn:uuid:" + u,
		"1:" + u + ":x", "", ":", "1:", ":" + u, "1", "abc", "1:\x00" + u[1:],
	} {
		f.Add(seed)
	}
	q := openFuzzQueue(f)
	if err := q.Send(ctx, queue.Text("held")); err != nil {
		f.Fatal(err)
	}
	msgs, err := q.Receive(ctx, 1, queue.ReceiveVisibility(queue.MaxVisibility))
	if err != nil || len(msgs) != 1 {
		f.Fatalf("Receive: %v, %v", msgs, err)
	}
	held := msgs[0]
	peekHeld := func(t *testing.T) queue.PeekedMessage {
		t.Helper()
		ms, err := q.Peek(ctx, 10)
		if err != nil || len(ms) != 1 || ms[0].ID != held.ID {
			t.Fatalf("Peek = %+v, %v; want only the held message %d", ms, err, held.ID)
		}
		return ms[0]
	}
	before := peekHeld(&testing.T{})

	f.Fuzz(func(t *testing.T, r string) {
		if r == held.ReceiptHandle {
			return // the one current receipt; the conformance suite covers it
		}
		id, uid, ok := sqlitequeue.ParseReceiptParts(r)
		if want := ruleAccepts(r); ok != want {
			t.Fatalf("parseReceipt(%q) ok = %v; the rule says %v", r, ok, want)
		}
		if ok {
			if back := sqlitequeue.FormatReceipt(id, uid); back != r {
				t.Fatalf("parseReceipt(%q) = %d, %q, which formats as %q", r, id, uid, back)
			}
		}
		stale := ok && id == held.ID
		for _, op := range []struct {
			name string
			do   func() error
		}{
			{"Ack", func() error { return q.Ack(ctx, r) }},
			{"Nack", func() error { return q.Nack(ctx, r) }},
		} {
			err := op.do()
			switch {
			case stale:
				wantFuzzCode(t, err, bindings.CodeQueueOperationFailed, "")
				if !errors.Is(err, queue.ErrStaleReceipt) {
					t.Fatalf("%s(%q) = %v; want a stale receipt", op.name, r, err)
				}
			case err != nil:
				t.Fatalf("%s(%q) = %v; want a no-op success", op.name, r, err)
			}
		}
		err := q.Extend(ctx, r, time.Hour)
		switch {
		case !ok:
			be := wantFuzzCode(t, err, bindings.CodeInvalidInput, "receipt")
			if !strings.Contains(be.Msg, "{id}:{uuid}") {
				t.Fatalf("Extend(%q) = %v; want the expected form named", r, err)
			}
		case stale:
			wantFuzzCode(t, err, bindings.CodeQueueOperationFailed, "")
			if !errors.Is(err, queue.ErrStaleReceipt) {
				t.Fatalf("Extend(%q) = %v; want a stale receipt", r, err)
			}
		default:
			wantFuzzCode(t, err, bindings.CodeQueueOperationFailed, "")
			if !errors.Is(err, queue.ErrMessageGone) {
				t.Fatalf("Extend(%q) = %v; want message gone", r, err)
			}
		}
		if after := peekHeld(t); !after.VisibleAt.Equal(before.VisibleAt) || after.Attempt != 1 || !after.Delivered {
			t.Fatalf("receipt %q changed the held message: %+v, was %+v", r, after, before)
		}
	})
}
