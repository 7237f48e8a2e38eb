package queue

import (
	"bytes"
	"encoding/json"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// PayloadType is the payload_type column: "text" or "json".
type PayloadType string

// The payload types of localqueue.v1.
const (
	TypeText PayloadType = "text"
	TypeJSON PayloadType = "json"
)

// Payload is a message body as stored: a raw string for text, serialized
// JSON for json.
type Payload struct {
	Type PayloadType
	Data string
	err  error
}

// Text is a text payload.
func Text(s string) Payload { return Payload{Type: TypeText, Data: s} }

// JSON is a JSON payload: v serialized with encoding/json, compact and
// without encoding/json's HTML escaping: <, >, & and U+2028/U+2029 are
// stored as they are, byte for byte what another implementation of the
// format (serde_json) writes, and the MaxPayloadBytes limit counts that
// size. A json.RawMessage or []byte holding JSON is stored as is
// (compacted, its escapes kept).
func JSON(v any) Payload {
	var b []byte
	var err error
	switch raw := v.(type) {
	case json.RawMessage:
		b, err = compact(raw)
	case []byte:
		b, err = compact(raw)
	default:
		b, err = marshalCompact(v)
	}
	if err != nil {
		return Payload{Type: TypeJSON, err: bindings.Wrap(bindings.CodeInvalidInput, err, "payload: not serializable as JSON")}
	}
	return Payload{Type: TypeJSON, Data: string(b)}
}

// marshalCompact is json.Marshal without HTML escaping. encoding/json
// escapes U+2028 and U+2029 even then; they are turned back into the
// characters, as serde_json writes them.
func marshalCompact(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return unescapeSeparators(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// unescapeSeparators replaces the escapes \u2028 and \u2029 in encoded JSON
// by the characters. Backslashes only occur in strings, each starting an
// escape, so skipping every escape whole keeps an escaped backslash
// followed by "u2028" as it is.
func unescapeSeparators(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u202`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			out = append(out, b[i])
			continue
		}
		switch string(b[i:min(i+6, len(b))]) {
		case `\u2028`:
			out = append(out, "\u2028"...)
			i += 5
		case `\u2029`:
			out = append(out, "\u2029"...)
			i += 5
		default:
			out = append(out, b[i], b[i+1])
			i++
		}
	}
	return out
}

func compact(raw []byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Decode unmarshals a JSON payload into v. Its errors are INVALID_INPUT and
// wrap encoding/json's (a *json.SyntaxError for data that is not JSON, which
// only a foreign writer can store; a *json.UnmarshalTypeError when v does
// not fit).
func (p Payload) Decode(v any) error {
	if p.Type != TypeJSON {
		return bindings.Errorf(bindings.CodeInvalidInput, "payload: type is %q, want %q", p.Type, TypeJSON)
	}
	if err := json.Unmarshal([]byte(p.Data), v); err != nil {
		return bindings.Wrap(bindings.CodeInvalidInput, err, "payload: decode %d bytes of JSON", len(p.Data))
	}
	return nil
}

// String returns the stored data.
func (p Payload) String() string { return p.Data }

// validate checks a payload before it touches the store.
func (p Payload) validate(field string) error {
	if p.err != nil {
		return p.err
	}
	switch p.Type {
	case TypeText:
	case TypeJSON:
		if !json.Valid([]byte(p.Data)) {
			return bindings.Errorf(bindings.CodeInvalidInput, "%s: type json but data is not valid JSON (%d bytes)", field, len(p.Data))
		}
	default:
		return bindings.Errorf(bindings.CodeInvalidInput, "%s: type must be %q or %q, got %q", field, TypeText, TypeJSON, p.Type)
	}
	if len(p.Data) > MaxPayloadBytes {
		return bindings.Errorf(bindings.CodeInvalidInput,
			"%s: must be at most %d bytes serialized, got %d bytes", field, MaxPayloadBytes, len(p.Data))
	}
	return nil
}

// driver is the payload as engines see it.
func (p Payload) driver() driver.Payload { return driver.Payload{Type: string(p.Type), Data: p.Data} }

// payloadOf is an engine's payload as callers see it.
func payloadOf(p driver.Payload) Payload { return Payload{Type: PayloadType(p.Type), Data: p.Data} }
