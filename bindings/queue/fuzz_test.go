package queue_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
)

// openFuzzQueue opens one real store for a fuzz worker; every input of the
// worker uses it.
func openFuzzQueue(f *testing.F) *queue.Queue {
	f.Helper()
	q, err := queue.Open(ctx, filepath.Join(f.TempDir(), "queue"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = q.Close() })
	return q
}

// wantFuzzCode checks that err is an *bindings.Error with code, and, when field
// is not "", that its message starts with "field: ".
func wantFuzzCode(t *testing.T, err error, code bindings.Code, field string) *bindings.Error {
	t.Helper()
	var be *bindings.Error
	if !errors.As(err, &be) || be.Code != code || !errors.Is(err, &bindings.Error{Code: code}) {
		t.Fatalf("error %T %v; want an *bindings.Error with code %s", err, err, code)
	}
	if field != "" && !strings.HasPrefix(be.Msg, field+": ") {
		t.Fatalf("message %q does not start with the field %q", be.Msg, field)
	}
	return be
}

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
		id, uid, ok := queue.ExportParseReceipt(r)
		if want := ruleAccepts(r); ok != want {
			t.Fatalf("parseReceipt(%q) ok = %v; the rule says %v", r, ok, want)
		}
		if ok {
			if back := queue.ExportFormatReceipt(id, uid); back != r {
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

// The spec's send, as a foreign spec-exact writer runs it: any payload_type
// and payload_data it likes, as text or as a blob.
const foreignSend = `INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES (?1, ?2, ?3, ?3, 0)`

// FuzzPayload checks payloads end to end on a real store: a text payload
// comes back byte for byte; a JSON payload is accepted exactly when it is
// valid JSON, comes back compacted and decodes as the input does; anything
// over MaxPayloadBytes is INVALID_INPUT naming the limit and the size. A row
// a foreign writer stored, whatever its type and data, is delivered as
// stored, and Decode answers nil or an *bindings.Error.
func FuzzPayload(f *testing.F) {
	for _, seed := range []struct {
		typ  string
		data string
		pad  uint32
		blob bool
	}{
		{"text", "hello", 0, false},
		{"json", `{"a":[1,2.5,"x"],"b":null}`, 0, false},
		{"json", ` { "a" : 1 } `, 0, true},
		{"json", `{"a":`, 0, false},
		{"json", "", 0, false},
		{"json", "\"\xff\"", 0, false},
		{"text", "\x00\xff\xfe", 0, true},
		{"xml", "<a/>", 0, false},
		{"", "", 0, false},
		{"JSON", "1", 0, false},
		{"text", "", queue.MaxPayloadBytes, false},
		{"text", "x", queue.MaxPayloadBytes, false},
		{"json", "1", queue.MaxPayloadBytes - 14, false},
		{"json", "1", queue.MaxPayloadBytes - 13, false},
	} {
		f.Add(seed.typ, []byte(seed.data), seed.pad, seed.blob)
	}
	q := openFuzzQueue(f)
	f.Fuzz(func(t *testing.T, typ string, data []byte, pad uint32, blob bool) {
		pad %= queue.MaxPayloadBytes + 64

		// Text: anything up to the limit, back byte for byte.
		text := string(data) + strings.Repeat("x", int(pad))
		if err := q.Send(ctx, queue.Text(text)); len(text) > queue.MaxPayloadBytes {
			wantTooBig(t, err, len(text))
		} else if err != nil {
			t.Fatalf("Send(Text(%d bytes)): %v", len(text), err)
		} else {
			p := receiveOnly(t, q)
			if p.Type != queue.TypeText || p.Data != text {
				t.Fatalf("text payload came back as %q, %d bytes; sent %d bytes", p.Type, len(p.Data), len(text))
			}
			wantFuzzCode(t, p.Decode(new(any)), bindings.CodeInvalidInput, "payload")
		}

		// JSON: valid exactly when json.Valid says so, stored compacted.
		in := data
		if pad > 0 {
			in = []byte(`{"d":` + string(data) + `,"p":"` + strings.Repeat("x", int(pad)) + `"}`)
		}
		p := queue.JSON(json.RawMessage(in))
		if pb := queue.JSON(in); pb.Type != p.Type || pb.Data != p.Data {
			t.Fatalf("JSON([]byte) = %s, JSON(json.RawMessage) = %s; the doc says both store the JSON as is", short(pb.Data), short(p.Data))
		}
		err := q.Send(ctx, p)
		switch {
		case !json.Valid(in):
			wantFuzzCode(t, err, bindings.CodeInvalidInput, "payload")
		case len(p.Data) > queue.MaxPayloadBytes:
			wantTooBig(t, err, len(p.Data))
		case err != nil:
			t.Fatalf("Send(JSON(%s)): %v", short(string(in)), err)
		default:
			got := receiveOnly(t, q)
			if got.Type != queue.TypeJSON || got.Data != p.Data || len(got.Data) > len(in) {
				t.Fatalf("JSON payload %s came back as %q %s", short(string(in)), got.Type, short(got.Data))
			}
			checkDecode(t, got, in)
		}

		// A foreign spec-exact writer's row, delivered as stored.
		var col any = text
		if blob {
			col = []byte(text)
		}
		if _, err := queue.ExportDB(q).Exec(ctx, foreignSend, typ, col, time.Now().UnixMilli()); err != nil {
			t.Fatalf("foreign insert: %v", err)
		}
		got := receiveOnly(t, q)
		if string(got.Type) != typ || got.Data != text {
			t.Fatalf("foreign row (%q, %d bytes) came back as (%q, %d bytes)", typ, len(text), got.Type, len(got.Data))
		}
		if typ != string(queue.TypeJSON) {
			be := wantFuzzCode(t, got.Decode(new(any)), bindings.CodeInvalidInput, "payload")
			if !strings.Contains(be.Msg, strconv.Quote(typ)) {
				t.Fatalf("Decode of type %q: %v; want the type named", typ, be)
			}
			return
		}
		checkDecode(t, got, []byte(text))
	})
}

// checkDecode checks that Decode of a JSON payload agrees with
// json.Unmarshal of src, and that its error, if any, is INVALID_INPUT
// naming the payload and keeping the decoder's error.
func checkDecode(t *testing.T, p queue.Payload, src []byte) {
	t.Helper()
	var got, want any
	err := p.Decode(&got)
	wantErr := json.Unmarshal(src, &want)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("Decode(%s) = %v; json.Unmarshal says %v", short(p.Data), err, wantErr)
	}
	if err != nil {
		wantFuzzCode(t, err, bindings.CodeInvalidInput, "payload")
		var se *json.SyntaxError
		if errors.As(wantErr, &se) && !errors.As(err, &se) {
			t.Fatalf("Decode(%s) = %v; want the *json.SyntaxError kept", short(p.Data), err)
		}
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode(%s) = %v; json.Unmarshal gives %v", short(p.Data), got, want)
	}
	// Decoding into the wrong Go type is an error with the same code.
	if _, isNum := want.(float64); !isNum {
		var n float64
		wantFuzzCode(t, p.Decode(&n), bindings.CodeInvalidInput, "payload")
	} else if math.IsInf(want.(float64), 0) {
		t.Fatalf("Decode(%s) gave an infinity", short(p.Data))
	}
}

// short quotes s for a failure message, cut to 80 bytes.
func short(s string) string {
	if len(s) > 80 {
		return strconv.Quote(s[:80]) + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}

// wantTooBig checks the error of a payload of n bytes over the limit.
func wantTooBig(t *testing.T, err error, n int) {
	t.Helper()
	be := wantFuzzCode(t, err, bindings.CodeInvalidInput, "payload")
	if !strings.Contains(be.Msg, strconv.Itoa(queue.MaxPayloadBytes)) || !strings.Contains(be.Msg, strconv.Itoa(n)) {
		t.Fatalf("error %v does not name the limit %d and the size %d", be, queue.MaxPayloadBytes, n)
	}
}

// receiveOnly receives and acks the only message of q and returns its
// payload, checking that Peek saw the same payload first.
func receiveOnly(t *testing.T, q *queue.Queue) queue.Payload {
	t.Helper()
	peeked, err := q.Peek(ctx, 2)
	if err != nil || len(peeked) != 1 {
		t.Fatalf("Peek = %d messages, %v; want 1", len(peeked), err)
	}
	msgs, err := q.Receive(ctx, 1)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("Receive = %d messages, %v; want 1", len(msgs), err)
	}
	m := msgs[0]
	if m.Payload.Type != peeked[0].Payload.Type || m.Payload.Data != peeked[0].Payload.Data {
		t.Fatalf("Receive gave %q %s but Peek %q %s", m.Payload.Type, short(m.Payload.Data), peeked[0].Payload.Type, short(peeked[0].Payload.Data))
	}
	if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	return m.Payload
}
