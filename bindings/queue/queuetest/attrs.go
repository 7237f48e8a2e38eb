package queuetest

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
)

// sampleAttrs are attributes of every kind.
var sampleAttrs = queue.Attributes{
	"trace":   {Type: "String", String: "Root=1-abc"},
	"count":   {Type: "Number.int", String: "42"},
	"blob":    {Type: "Binary", Binary: []byte{0, 1, 2, 255}},
	"x.y-z_1": {Type: "String.custom", String: "ünï"},
}

// testAttributes: the attributes of a send come back with every receive
// (one and many), Consume and Peek of its message, a message without
// them has none, and bad attributes store nothing.
func testAttributes(t *testing.T, h Harness) {
	q := h.Open(t)
	if err := q.Send(ctx, queue.Text("with"), queue.WithAttributes(sampleAttrs)); err != nil {
		t.Fatal(err)
	}
	if err := q.SendBatch(ctx, []queue.Payload{queue.Text("b0"), queue.Text("b1")},
		queue.WithAttributes(nil, queue.Attributes{"k": {Type: "String", String: "v"}})); err != nil {
		t.Fatal(err)
	}
	send(t, q, queue.Text("without"))
	want := map[string]queue.Attributes{"with": sampleAttrs, "b0": nil, "b1": {"k": {Type: "String", String: "v"}}, "without": nil}
	check := func(how, text string, got queue.Attributes) {
		t.Helper()
		if !reflect.DeepEqual(got, want[text]) {
			t.Errorf("%s of %q: attributes %v; want %v", how, text, got, want[text])
		}
	}
	peeked := peekAll(t, q)
	if len(peeked) != 4 {
		t.Fatalf("peek shows %d messages; want 4", len(peeked))
	}
	for _, p := range peeked {
		check("peek", p.Payload.Data, p.Attributes)
	}
	one := receiveOne(t, q, queue.ReceiveVisibility(queue.MinVisibility))
	check("Receive(1)", one.Payload.Data, one.Attributes)
	msgs := receive(t, q, 10)
	for _, m := range msgs {
		check("Receive(10)", m.Payload.Data, m.Attributes)
		if err := q.Nack(ctx, m.ReceiptHandle); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- q.Consume(cctx, func(_ context.Context, m queue.Message) error {
			check("Consume", m.Payload.Data, m.Attributes)
			seen[m.Payload.Data] = true
			if len(seen) == 4 {
				cancel()
			}
			return nil
		}, queue.ConsumeWorkers(1))
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Consume did not deliver the 4 messages in 30 s")
	}
	if len(seen) != 4 {
		t.Fatalf("Consume saw %v; want 4 messages", seen)
	}

	n := rawCount(t, q)
	huge := strings.Repeat("v", queue.MaxPayloadBytes-10)
	for _, bad := range []struct {
		err  error
		want []string
	}{
		{q.Send(ctx, queue.Text("x"), queue.WithAttributes(queue.Attributes{"": {Type: "String", String: "v"}})), []string{"attribute name", `""`}},
		{q.Send(ctx, queue.Text("x"), queue.WithAttributes(queue.Attributes{"a..b": {Type: "String", String: "v"}})), []string{"attribute name", "a..b"}},
		{q.Send(ctx, queue.Text("x"), queue.WithAttributes(queue.Attributes{"a b": {Type: "String", String: "v"}})), []string{"attribute name", "a b"}},
		{q.Send(ctx, queue.Text("x"), queue.WithAttributes(queue.Attributes{"a": {Type: "Float", String: "1"}})), []string{`"a"`, "type", "Float"}},
		{q.Send(ctx, queue.Text("x"), queue.WithAttributes(queue.Attributes{"a": {Type: "String"}})), []string{`"a"`, "non-empty String"}},
		{q.Send(ctx, queue.Text("x"), queue.WithAttributes(queue.Attributes{"a": {Type: "Binary", String: "s"}})), []string{`"a"`, "non-empty Binary"}},
		{q.Send(ctx, queue.Text("x"), queue.WithAttributes(elevenAttrs())), []string{"at most 10", "got 11"}},
		{q.Send(ctx, queue.Text(huge), queue.WithAttributes(queue.Attributes{"big": {Type: "String", String: "0123456789"}})), []string{"65536", "65545"}},
		{q.SendBatch(ctx, []queue.Payload{queue.Text("x"), queue.Text("y")}, queue.WithAttributes(sampleAttrs)), []string{"attributes", "one per message", "2, got 1"}},
	} {
		wantInvalid(t, bad.err, bad.want...)
	}
	if got := rawCount(t, q); got != n {
		t.Fatalf("sends with bad attributes stored %d messages", got-n)
	}
}

func elevenAttrs() queue.Attributes {
	a := queue.Attributes{}
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"} {
		a[n] = queue.Attribute{Type: "String", String: n}
	}
	return a
}

// testAttributesDeadLetter: a dead letter keeps its attributes in its
// dead-letter queue, and a redrive brings them back with it.
func testAttributesDeadLetter(t *testing.T, h Harness) {
	needSibling(t, h)
	tl := newTimeline(t, h)
	dlq := tl.openSibling(t, h, "dlq", queue.WithBindingName("orders-dlq"))
	q := tl.open(t, h, queue.WithBindingName("orders"), queue.WithDeadLetter(1, dlq.Location()))
	if err := q.Send(ctx, queue.Text("poison"), queue.WithAttributes(sampleAttrs)); err != nil {
		t.Fatal(err)
	}
	m := receiveOne(t, q)
	if err := q.Nack(ctx, m.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	wantEmpty(t, q) // moved
	var dead []queue.PeekedMessage
	waitFor(t, "the dead letter", func() bool { dead = peekAll(t, dlq); return len(dead) == 1 })
	if !reflect.DeepEqual(dead[0].Attributes, sampleAttrs) {
		t.Fatalf("dead letter's attributes %v; want %v", dead[0].Attributes, sampleAttrs)
	}
	if res, err := dlq.Redrive(ctx); err != nil || res.Moved != 1 {
		t.Fatalf("Redrive = %+v, %v; want 1 moved", res, err)
	}
	back := receiveOne(t, q)
	if back.Payload.Data != "poison" || !reflect.DeepEqual(back.Attributes, sampleAttrs) {
		t.Fatalf("redriven message %q has attributes %v; want %v", back.Payload.Data, back.Attributes, sampleAttrs)
	}
	if !bytes.Equal(back.Attributes["blob"].Binary, []byte{0, 1, 2, 255}) {
		t.Fatalf("binary attribute %v", back.Attributes["blob"].Binary)
	}
}
