package queue

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/localcloud/localcloud/bindings"
)

// Limits of message attributes (WithAttributes), those of SQS.
const (
	// MaxAttributes is the most attributes one message carries, not
	// counting system attributes (SystemAttributePrefix), of which it may
	// carry MaxAttributes more.
	MaxAttributes = 10
	// SystemAttributePrefix begins the names of system attributes: those
	// SQS keeps apart from message attributes (AWSTraceHeader, kept as
	// "AWS.AWSTraceHeader" by localcloud's SQS API, which refuses message
	// attribute names with this prefix as SQS does).
	SystemAttributePrefix = "AWS."
	// MaxAttributeNameBytes bounds an attribute's name, and its type.
	MaxAttributeNameBytes = 256
)

// The base types of an attribute. A type may carry a custom suffix after a
// dot ("Number.float", "Binary.png"), kept as given.
const (
	AttributeString = "String"
	AttributeNumber = "Number"
	AttributeBinary = "Binary"
)

// Attribute is one message attribute: a String or Number type's value in
// String, a Binary type's in Binary.
type Attribute struct {
	Type   string `json:"type"`
	String string `json:"string,omitempty"`
	Binary []byte `json:"binary,omitempty"` // base64 in the stored JSON
}

// Attributes are a message's attributes by name: metadata beside the
// payload, as SQS's message attributes. The engine keeps them with the
// message (the SQLite engine in its lc_attributes table, the JetStream
// engine in a message header) as the JSON of this map, through dead
// letters, redrives and migrations; Receive, Consume and Peek return them.
type Attributes map[string]Attribute

// attrsOption is WithAttributes.
type attrsOption struct{ as []Attributes }

func (o attrsOption) applySend(s *sendOptions) { s.attrs, s.attrsSet = o.as, true }

// WithAttributes gives the messages of a Send (one Attributes) or a
// SendBatch (one per message, in slice order; nil for a message without)
// their attributes. At most MaxAttributes per message; a name is 1 to
// MaxAttributeNameBytes bytes of A-Z a-z 0-9 _ - . that neither starts nor
// ends with a dot nor holds two in a row; a type is String, Number or
// Binary, optionally followed by ".suffix" (at most MaxAttributeNameBytes
// bytes in all); a String or Number has a non-empty String, a Binary a
// non-empty Binary. The payload and the attributes (the bytes of every
// name, type and value) together are at most MaxPayloadBytes. A bad
// attribute is INVALID_INPUT naming it, and nothing is stored.
func WithAttributes(as ...Attributes) SendOption { return attrsOption{as: as} }

// encodeAttrs checks the attributes of the payloads ps (already checked)
// and returns each message's stored form: nil for a message without.
func encodeAttrs(as []Attributes, data []string) ([][]byte, error) {
	if len(as) != len(data) {
		return nil, bindings.Errorf(bindings.CodeInvalidInput, "attributes: must be one per message, %d, got %d", len(data), len(as))
	}
	out := make([][]byte, len(as))
	for i, a := range as {
		if len(a) == 0 {
			continue
		}
		field := "attributes"
		if len(as) > 1 {
			field = fmt.Sprintf("attributes of message %d", i)
		}
		size, err := checkAttrs(field, a)
		if err != nil {
			return nil, err
		}
		if total := len(data[i]) + size; total > MaxPayloadBytes {
			return nil, bindings.Errorf(bindings.CodeInvalidInput,
				"%s: the payload and its attributes must be at most %d bytes together, got %d (payload %d, attributes %d)",
				field, MaxPayloadBytes, total, len(data[i]), size)
		}
		b, err := json.Marshal(a)
		if err != nil {
			return nil, bindings.Wrap(bindings.CodeInvalidInput, err, "%s", field)
		}
		out[i] = b
	}
	return out, nil
}

// checkAttrs checks a message's attributes and returns their size: the
// bytes of every name, type and value.
func checkAttrs(field string, a Attributes) (int, error) {
	names := make([]string, 0, len(a))
	system := 0
	for n := range a {
		names = append(names, n)
		if strings.HasPrefix(n, SystemAttributePrefix) {
			system++
		}
	}
	if len(a)-system > MaxAttributes || system > MaxAttributes {
		return 0, bindings.Errorf(bindings.CodeInvalidInput, "%s: at most %d per message (and %d system attributes), got %d (and %d)",
			field, MaxAttributes, MaxAttributes, len(a)-system, system)
	}
	sort.Strings(names)
	size := 0
	for _, n := range names {
		v := a[n]
		if err := validAttrName(field, n); err != nil {
			return 0, err
		}
		base, _, _ := strings.Cut(v.Type, ".")
		if len(v.Type) > MaxAttributeNameBytes || (base != AttributeString && base != AttributeNumber && base != AttributeBinary) ||
			strings.HasSuffix(v.Type, ".") {
			return 0, bindings.Errorf(bindings.CodeInvalidInput,
				"%s: attribute %q: type must be String, Number or Binary, optionally with a .suffix, at most %d bytes; got %q", field, n, MaxAttributeNameBytes, v.Type)
		}
		switch {
		case base == AttributeBinary && (len(v.Binary) == 0 || v.String != ""):
			return 0, bindings.Errorf(bindings.CodeInvalidInput, "%s: attribute %q of type %s: needs a non-empty Binary value and no String value", field, n, v.Type)
		case base != AttributeBinary && (v.String == "" || len(v.Binary) != 0):
			return 0, bindings.Errorf(bindings.CodeInvalidInput, "%s: attribute %q of type %s: needs a non-empty String value and no Binary value", field, n, v.Type)
		}
		size += len(n) + len(v.Type) + len(v.String) + len(v.Binary)
	}
	return size, nil
}

func validAttrName(field, n string) error {
	bad := len(n) == 0 || len(n) > MaxAttributeNameBytes || n[0] == '.' || n[len(n)-1] == '.' || strings.Contains(n, "..")
	for i := 0; i < len(n) && !bad; i++ {
		c := n[i]
		bad = !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.')
	}
	if bad {
		return bindings.Errorf(bindings.CodeInvalidInput,
			"%s: attribute name %q: must be 1 to %d bytes of A-Z a-z 0-9 _ - . , not starting or ending with a dot nor holding two in a row",
			field, n, MaxAttributeNameBytes)
	}
	return nil
}

// attrsOf decodes an engine's stored attributes; nil for none, and for a
// value that is not their JSON (which only another program could store).
func attrsOf(b []byte) Attributes {
	if len(b) == 0 {
		return nil
	}
	var a Attributes
	if json.Unmarshal(b, &a) != nil || len(a) == 0 {
		return nil
	}
	return a
}
