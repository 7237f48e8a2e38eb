package queue_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
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
