package sqsapi

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"regexp"
	"sort"
	"strings"

	"github.com/localcloud/localcloud/bindings/queue"
)

// Message attributes and message system attributes. Both are kept in the
// message's queue.Attributes: a message attribute under its name, a system
// attribute (AWSTraceHeader, the only one SQS takes on a send) under
// sysPrefix + its name, a prefix SQS forbids in message attribute names.
const (
	sysPrefix      = "AWS."
	traceHeader    = "AWSTraceHeader"
	maxMsgAttrs    = queue.MaxAttributes
	maxAttrNameLen = queue.MaxAttributeNameBytes
)

// numberRe is the form of a Number attribute's value.
var numberRe = regexp.MustCompile(`^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$`)

// checkAttrValue reads one attribute value {DataType, StringValue,
// BinaryValue} named field in errors.
func checkAttrValue(field, name string, v any) (queue.Attribute, *apiError) {
	var a queue.Attribute
	m, ok := v.(map[string]any)
	if !ok {
		return a, errf(codeInvalidParameterValue, "%s: the value of message attribute %q must be a structure with DataType and StringValue or BinaryValue", field, name)
	}
	p := params(m)
	dt, aerr := p.str("DataType")
	if aerr != nil {
		return a, aerr
	}
	base, _, _ := strings.Cut(dt, ".")
	if dt == "" {
		return a, errf(codeInvalidParameterValue, "%s: message attribute %q must have a DataType (String, Number or Binary, optionally with a .label)", field, name)
	}
	if len(dt) > maxAttrNameLen || (base != "String" && base != "Number" && base != "Binary") || strings.HasSuffix(dt, ".") {
		return a, errf(codeInvalidParameterValue, "%s: message attribute %q has an invalid DataType %q: String, Number or Binary, optionally followed by .label, at most %d characters",
			field, name, dt, maxAttrNameLen)
	}
	a.Type = dt
	s, aerr := p.str("StringValue")
	if aerr != nil {
		return a, aerr
	}
	b64, aerr := p.str("BinaryValue")
	if aerr != nil {
		return a, aerr
	}
	for _, f := range []string{"StringListValues", "BinaryListValues"} {
		if l, ok := m[f].([]any); ok && len(l) > 0 {
			return a, errf(codeInvalidParameterValue, "%s: message attribute %q: %s is reserved by SQS and not supported", field, name, f)
		}
	}
	if base == "Binary" {
		if b64 == "" || s != "" {
			return a, errf(codeInvalidParameterValue, "%s: message attribute %q of type %s must contain a non-empty BinaryValue and no StringValue", field, name, dt)
		}
		bin, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(bin) == 0 {
			return a, errf(codeInvalidParameterValue, "%s: message attribute %q: BinaryValue is not base64: %v", field, name, err)
		}
		a.Binary = bin
		return a, nil
	}
	if s == "" || b64 != "" {
		return a, errf(codeInvalidParameterValue, "%s: message attribute %q of type %s must contain a non-empty StringValue and no BinaryValue", field, name, dt)
	}
	if base == "Number" && (!numberRe.MatchString(s) || len(strings.TrimLeft(strings.Split(strings.ToLower(s), "e")[0], "+-0.")) > 38) {
		return a, errf(codeInvalidParameterValue, "%s: message attribute %q of type %s: %q is not a number of at most 38 significant digits", field, name, dt, s)
	}
	if aerr := validBody(field+"."+name+".StringValue", s); aerr != nil {
		return a, aerr
	}
	a.String = s
	return a, nil
}

// validAttrName checks a message attribute's name by SQS's rules.
func validAttrName(field, n string) *apiError {
	lower := strings.ToLower(n)
	bad := n == "" || len(n) > maxAttrNameLen || n[0] == '.' || n[len(n)-1] == '.' || strings.Contains(n, "..") ||
		strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.")
	for i := 0; i < len(n) && !bad; i++ {
		c := n[i]
		bad = !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.')
	}
	if bad {
		return errf(codeInvalidParameterValue, "%s: message attribute name %q is invalid: 1 to %d characters of A-Z, a-z, 0-9, _, - and ., "+
			"not starting or ending with a period, no two periods in a row, not starting with AWS. or Amazon.", field, n, maxAttrNameLen)
	}
	return nil
}

// sendAttrs reads a send's MessageAttributes and MessageSystemAttributes
// (pfx names them in errors) into the message's queue.Attributes, and
// returns their size as SQS counts it (names, types and values).
func sendAttrs(p params, pfx string) (queue.Attributes, int, *apiError) {
	var out queue.Attributes
	size := 0
	for _, f := range []string{"MessageAttributes", "MessageSystemAttributes"} {
		v, ok := p[f]
		if !ok || v == nil {
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, 0, errf(codeInvalidParameterValue, "%s%s: must be a map of attribute names to values", pfx, f)
		}
		if len(m) > maxMsgAttrs {
			return nil, 0, errf(codeInvalidParameterValue, "%s%s: number of message attributes [%d] exceeds the allowed maximum [%d]", pfx, f, len(m), maxMsgAttrs)
		}
		for name, val := range m {
			key := name
			if f == "MessageSystemAttributes" {
				if name != traceHeader {
					return nil, 0, errf(codeInvalidParameterValue, "%s%s: %q is not a message system attribute a send may set; the only one is %s", pfx, f, name, traceHeader)
				}
				key = sysPrefix + name
			} else if aerr := validAttrName(pfx+f, name); aerr != nil {
				return nil, 0, aerr
			}
			a, aerr := checkAttrValue(pfx+f, name, val)
			if aerr != nil {
				return nil, 0, aerr
			}
			if key != name && !strings.HasPrefix(a.Type, "String") {
				return nil, 0, errf(codeInvalidParameterValue, "%s%s: %s must be of DataType String, got %s", pfx, f, name, a.Type)
			}
			if out == nil {
				out = queue.Attributes{}
			}
			out[key] = a
			size += len(name) + len(a.Type) + len(a.String) + len(a.Binary)
		}
	}
	return out, size, nil
}

// split parts a message's attributes into its message attributes and its
// system attributes, by their SQS names.
func split(a queue.Attributes) (msg, sys queue.Attributes) {
	for n, v := range a {
		if s, ok := strings.CutPrefix(n, sysPrefix); ok {
			if sys == nil {
				sys = queue.Attributes{}
			}
			sys[s] = v
			continue
		}
		if msg == nil {
			msg = queue.Attributes{}
		}
		msg[n] = v
	}
	return msg, sys
}

// md5OfAttrs is MD5OfMessageAttributes (and MD5OfMessageSystemAttributes)
// as SQS computes it: over the attributes sorted by name, each its name,
// its data type (each a 4-byte big-endian length and the UTF-8 bytes), a
// transport byte (1 for String and Number, 2 for Binary) and its value
// (length and bytes). "" when there are none.
func md5OfAttrs(a queue.Attributes) string {
	if len(a) == 0 {
		return ""
	}
	names := make([]string, 0, len(a))
	for n := range a {
		names = append(names, n)
	}
	sort.Strings(names)
	h := md5.New()
	put := func(b []byte) {
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(b)))
		h.Write(l[:])
		h.Write(b)
	}
	for _, n := range names {
		v := a[n]
		put([]byte(n))
		put([]byte(v.Type))
		if strings.HasPrefix(v.Type, "Binary") {
			h.Write([]byte{2})
			put(v.Binary)
		} else {
			h.Write([]byte{1})
			put([]byte(v.String))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// attrValue is an attribute as an answer shows it.
func attrValue(v queue.Attribute) obj {
	if strings.HasPrefix(v.Type, "Binary") {
		return obj{{"BinaryValue", base64.StdEncoding.EncodeToString(v.Binary)}, {"DataType", v.Type}}
	}
	return obj{{"StringValue", v.String}, {"DataType", v.Type}}
}

// wantedAttrs is the MessageAttributeNames of a receive: every attribute
// for "All" or ".*", those with a prefix for "prefix.*", else by name.
type wantedAttrs struct {
	all      bool
	names    map[string]bool
	prefixes []string
}

func wantedOf(names []string) wantedAttrs {
	w := wantedAttrs{names: map[string]bool{}}
	for _, n := range names {
		switch {
		case n == "All" || n == ".*":
			w.all = true
		case strings.HasSuffix(n, ".*"):
			w.prefixes = append(w.prefixes, strings.TrimSuffix(n, "*"))
		default:
			w.names[n] = true
		}
	}
	return w
}

func (w wantedAttrs) pick(a queue.Attributes) queue.Attributes {
	if w.all || len(a) == 0 {
		return a
	}
	var out queue.Attributes
	for n, v := range a {
		ok := w.names[n]
		for _, p := range w.prefixes {
			ok = ok || strings.HasPrefix(n, p)
		}
		if ok {
			if out == nil {
				out = queue.Attributes{}
			}
			out[n] = v
		}
	}
	return out
}
