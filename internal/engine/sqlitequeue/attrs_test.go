package sqlitequeue_test

import (
	"testing"

	"github.com/localcloud/localcloud/bindings/queue"
)

// attrRows counts the rows of lc_attributes.
func attrRows(t *testing.T, q *queue.Queue) int {
	t.Helper()
	var n int
	if err := dbOf(q).R.QueryRowContext(ctx, `SELECT COUNT(*) FROM lc_attributes`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAttributesGoWithTheirMessage: an ack (one, a batch) and a purge
// delete a message's attributes; a row a foreign ack left behind is
// deleted by the next send with attributes and never read as another
// message's; a handle opened on a store without attributes starts
// deleting them once it receives some.
func TestAttributesGoWithTheirMessage(t *testing.T) {
	dir := t.TempDir()
	q := hwOpen(t, dir)
	other := hwOpen(t, dir) // opened before the store had attributes
	a := queue.Attributes{"k": {Type: "String", String: "v"}}
	for range 3 {
		if err := q.Send(ctx, queue.Text("m"), queue.WithAttributes(a)); err != nil {
			t.Fatal(err)
		}
	}
	if n := attrRows(t, q); n != 3 {
		t.Fatalf("%d attribute rows after 3 sends; want 3", n)
	}
	ms, err := other.Receive(ctx, 3)
	if err != nil || len(ms) != 3 || ms[0].Attributes["k"].String != "v" {
		t.Fatalf("receive = %+v, %v", ms, err)
	}
	if err := other.Ack(ctx, ms[0].ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	if n := attrRows(t, q); n != 2 {
		t.Fatalf("%d attribute rows after an ack; want 2", n)
	}
	if _, err := other.AckBatch(ctx, []string{ms[1].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if n := attrRows(t, q); n != 1 {
		t.Fatalf("%d attribute rows after a batch ack; want 1", n)
	}
	// A foreign ack: the spec's delete alone leaves the row.
	if _, err := dbOf(q).Exec(ctx, `DELETE FROM messages WHERE id = ?1`, ms[2].ID); err != nil {
		t.Fatal(err)
	}
	if err := q.Send(ctx, queue.Text("plain")); err != nil { // a later id, no attributes
		t.Fatal(err)
	}
	got, err := q.Receive(ctx, 1)
	if err != nil || len(got) != 1 || got[0].Payload.Data != "plain" || got[0].Attributes != nil {
		t.Fatalf("receive of a message sent without attributes = %+v, %v", got, err)
	}
	if err := q.Send(ctx, queue.Text("with"), queue.WithAttributes(a)); err != nil {
		t.Fatal(err)
	}
	if n := attrRows(t, q); n != 1 {
		t.Fatalf("%d attribute rows; want 1: the foreign ack's row pruned by the send", n)
	}
	if err := q.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if n := attrRows(t, q); n != 0 {
		t.Fatalf("%d attribute rows after a purge; want 0", n)
	}
}
