package queuetest

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
)

func testPayloadTextLimit(t *testing.T, h Harness) {
	q := h.Open(t)
	max := strings.Repeat("a", queue.MaxPayloadBytes)
	if queue.MaxPayloadBytes != 65536 {
		t.Fatalf("MaxPayloadBytes = %d; the spec says 64 KiB (65536)", queue.MaxPayloadBytes)
	}
	wantInvalid(t, q.Send(ctx, queue.Text(max+"a")), "payload", "65536", "65537")
	// Bytes, not characters: 32,768 two-byte runes are 65,536 bytes.
	wide := strings.Repeat("é", queue.MaxPayloadBytes/2)
	wantInvalid(t, q.Send(ctx, queue.Text(wide+"a")), "payload", "65536", "65537")
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows after rejected sends; want 0 (nothing may be written)", n)
	}
	send(t, q, queue.Text(max))
	send(t, q, queue.Text(wide))
	msgs := receive(t, q, 2)
	if len(msgs) != 2 || msgs[0].Payload.Data != max || msgs[1].Payload.Data != wide {
		t.Fatalf("the 65,536-byte payloads did not come back intact (%d messages)", len(msgs))
	}
}

func testPayloadJSONLimit(t *testing.T, h Harness) {
	q := h.Open(t)
	// A JSON string of n 'a's serializes to n+2 bytes.
	wantInvalid(t, q.Send(ctx, queue.JSON(strings.Repeat("a", queue.MaxPayloadBytes-1))), "payload", "65536", "65537")
	// The limit is on the compact form another implementation writes:
	// '<' is one byte, not encoding/json's \u003c (6 bytes), so 65,535 of
	// them are 65,537 bytes and 65,534 exactly the limit (below).
	wantInvalid(t, q.Send(ctx, queue.JSON(strings.Repeat("<", queue.MaxPayloadBytes-1))), "payload", "65536", "65537")
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows after rejected sends; want 0", n)
	}
	for _, at := range []string{strings.Repeat("a", queue.MaxPayloadBytes-2), strings.Repeat("<", queue.MaxPayloadBytes-4) + "&>"} {
		send(t, q, queue.JSON(at))
		m := receiveOne(t, q)
		if m.Payload.Type != queue.TypeJSON || m.Payload.Data != `"`+at+`"` {
			t.Fatalf("got type %q, %d bytes; want json, the 65536-byte compact form", m.Payload.Type, len(m.Payload.Data))
		}
		var got string
		if err := m.Payload.Decode(&got); err != nil || got != at {
			t.Fatalf("Decode: %v (equal: %v)", err, got == at)
		}
		if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
			t.Fatal(err)
		}
	}
}

func testPayloadInvalid(t *testing.T, h Harness) {
	q := h.Open(t)
	wantInvalid(t, q.Send(ctx, queue.JSON(func() {})), "payload")
	wantInvalid(t, q.Send(ctx, queue.Payload{Type: queue.TypeJSON, Data: `{"open":`}), "payload", "JSON")
	wantInvalid(t, q.Send(ctx, queue.Payload{Type: "xml", Data: "<a/>"}), "payload", "xml")
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows after rejected sends; want 0", n)
	}
}

func testReceiveBatch(t *testing.T, h Harness) {
	q := h.Open(t)
	// Rejected on an empty queue too: validation comes before the store.
	for _, n := range []int{0, 11, -1} {
		_, err := q.Receive(ctx, n)
		wantInvalid(t, err, "max", "10", strconv.Itoa(n))
	}
	sendTexts(t, q, "m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9", "m10", "m11")
	for _, n := range []int{0, 11} {
		_, err := q.Receive(ctx, n)
		wantInvalid(t, err, "max", "10", strconv.Itoa(n))
	}
	claimed := 0
	for _, m := range peekAll(t, q) {
		if m.Attempt > 0 {
			claimed++
		}
	}
	if claimed != 0 {
		t.Fatalf("%d messages claimed by rejected receives; want 0", claimed)
	}
	wantTexts(t, receive(t, q, 1), "m0")
	wantTexts(t, receive(t, q, 10), "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9", "m10")
	wantTexts(t, receive(t, q, 10), "m11")
}

func testVisibilityLimits(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	sendTexts(t, q, "a", "b")
	for _, d := range []time.Duration{0, -time.Second, queue.MinVisibility - 1, queue.MaxVisibility + 1} {
		_, err := q.Receive(ctx, 1, queue.ReceiveVisibility(d))
		wantInvalid(t, err, "visibility", queue.MaxVisibility.String())
	}
	if n := rawCount(t, q); n != 2 {
		t.Fatalf("%d rows; want 2", n)
	}
	beforeB := tl.now()
	b := receive(t, q, 1, queue.ReceiveVisibility(queue.MaxVisibility))
	afterB := tl.now()
	wantTexts(t, b, "a")
	before := tl.now()
	a := receive(t, q, 1, queue.ReceiveVisibility(queue.MinVisibility))
	after := tl.now()
	wantTexts(t, a, "b")
	if !tl.isReal() { // on real time a 1 ms lease may have ended before Peek
		tl.wantLeaseEnd(t, "visible_at with the minimum lease", peekMessage(t, q, a[0].ID), before, after, queue.MinVisibility)
	}
	tl.wantLeaseEnd(t, "visible_at with the maximum lease", peekMessage(t, q, b[0].ID), beforeB, afterB, queue.MaxVisibility)
}

func testJSONEqual(t *testing.T, h Harness) {
	q := h.Open(t)
	sent := map[string]any{"key": "value", "num": 42}
	send(t, q, queue.JSON(sent))
	send(t, q, queue.JSON(json.RawMessage(`{ "key" : "value", "num" : 42 }`)))
	sendTexts(t, q, `{"key":"value","num":42}`)
	msgs := receive(t, q, 10)
	if len(msgs) != 3 {
		t.Fatalf("got %d messages; want 3", len(msgs))
	}
	want := map[string]any{"key": "value", "num": float64(42)}
	for i, m := range msgs[:2] {
		if m.Payload.Type != queue.TypeJSON {
			t.Fatalf("message %d type %q; want json", i, m.Payload.Type)
		}
		var got map[string]any
		if err := m.Payload.Decode(&got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("message %d = %v; want %v", i, got, want)
		}
	}
	if m := msgs[2]; m.Payload.Type != queue.TypeText || m.Payload.Data != `{"key":"value","num":42}` {
		t.Errorf("text payload came back as %q %q; want text, unchanged", m.Payload.Type, m.Payload.Data)
	}
	if err := msgs[2].Payload.Decode(new(any)); !errors.Is(err, bindings.ErrInvalidInput) {
		t.Errorf("Decode of a text payload: %v; want INVALID_INPUT", err)
	}
}
