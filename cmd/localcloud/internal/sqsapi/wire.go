package sqsapi

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// The two wire protocols of SQS: AWS JSON 1.0 (X-Amz-Target:
// AmazonSQS.<Op>, current SDKs) and Query (form Action=<Op>, XML answers
// in the 2012-11-05 namespace; older SDKs and CLIs). A request of either is
// decoded into one params tree in the JSON shape, so every operation reads
// its input one way; an answer is built as an ordered tree (obj) and
// encoded in the protocol of the request.

const (
	xmlNS       = "http://queue.amazonaws.com/doc/2012-11-05/"
	jsonType    = "application/x-amz-json-1.0"
	targetPfx   = "AmazonSQS."
	errTypePfx  = "com.amazonaws.sqs#"
	queryErrHdr = "x-amzn-query-error"
)

// params is a decoded request: JSON-shaped values (string, json.Number,
// bool, []any, map[string]any).
type params map[string]any

// decodeJSON reads an AWS JSON 1.0 body.
func decodeJSON(body []byte) (params, *apiError) {
	p := params{}
	if len(bytes.TrimSpace(body)) == 0 {
		return p, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		return nil, errf(codeSerialization, "the request body is not a JSON object: %v", err)
	}
	return p, nil
}

// queryRenames are the flattened names of the Query protocol and the
// members they stand for in the JSON shape.
var queryRenames = map[string]string{
	"AttributeName":                            "AttributeNames",
	"MessageAttributeName":                     "MessageAttributeNames",
	"MessageSystemAttributeName":               "MessageSystemAttributeNames",
	"SendMessageBatchRequestEntry":             "Entries",
	"DeleteMessageBatchRequestEntry":           "Entries",
	"ChangeMessageVisibilityBatchRequestEntry": "Entries",
	"TagKey": "TagKeys",
}

// queryMaps are the flattened maps of the Query protocol: the member, the
// JSON name and the key and value fields of each entry.
var queryMaps = map[string][3]string{
	"Attribute":              {"Attributes", "Name", "Value"},
	"MessageAttribute":       {"MessageAttributes", "Name", "Value"},
	"MessageSystemAttribute": {"MessageSystemAttributes", "Name", "Value"},
	"Tag":                    {"Tags", "Key", "Value"},
}

// decodeQuery turns a Query form (A.1.B=x) into the JSON shape.
func decodeQuery(form url.Values) (params, *apiError) {
	root := map[string]any{}
	for key, vals := range form {
		if key == "Action" || key == "Version" || len(vals) == 0 {
			continue
		}
		cur := root
		for rest, more := key, true; more; {
			var s string
			s, rest, more = strings.Cut(rest, ".")
			if s == "member" || s == "entry" {
				continue
			}
			if !more {
				cur[s] = vals[0]
				break
			}
			next, ok := cur[s].(map[string]any)
			if !ok {
				if _, isLeaf := cur[s].(string); isLeaf {
					return nil, errf(codeInvalidParameterValue, "parameter %s: %s is given both as a value and as a structure", key, s)
				}
				next = map[string]any{}
				cur[s] = next
			}
			cur = next
		}
	}
	return params(shape(root).(map[string]any)), nil
}

// shape turns the maps keyed 1..n of a decoded form into lists, and the
// flattened names into the JSON shape's.
func shape(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	if idx, isList := indexKeys(m); isList {
		out := make([]any, 0, len(idx))
		for _, k := range idx {
			out = append(out, shape(m[strconv.Itoa(k)]))
		}
		return out
	}
	out := map[string]any{}
	for k, val := range m {
		val = shape(val)
		if mm, isMap := queryMaps[k]; isMap {
			if list, ok := val.([]any); ok {
				entries := map[string]any{}
				for _, e := range list {
					em, _ := e.(map[string]any)
					name, _ := em[mm[1]].(string)
					entries[name] = em[mm[2]]
				}
				out[mm[0]] = entries
				continue
			}
		}
		if to, ok := queryRenames[k]; ok {
			k = to
		}
		out[k] = val
	}
	return out
}

// indexKeys reports whether every key of m is a positive integer, and
// returns them in order.
func indexKeys(m map[string]any) ([]int, bool) {
	if len(m) == 0 {
		return nil, false
	}
	idx := make([]int, 0, len(m))
	for k := range m {
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 {
			return nil, false
		}
		idx = append(idx, n)
	}
	sort.Ints(idx)
	return idx, true
}

// str returns the string parameter name; "" when absent.
func (p params) str(name string) (string, *apiError) {
	v, ok := p[name]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", errf(codeInvalidParameterValue, "parameter %s: must be a string, got %v", name, v)
	}
	return s, nil
}

// required returns the string parameter name, which must be given.
func (p params) required(name string) (string, *apiError) {
	s, err := p.str(name)
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", errf(codeMissingParameter, "the request must contain the parameter %s", name)
	}
	return s, nil
}

// num returns the integer parameter name in lo..hi, def when absent.
func (p params) num(name string, lo, hi, def int) (int, *apiError) {
	v, ok := p[name]
	if !ok || v == nil {
		return def, nil
	}
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case string:
		s = x
	default:
		return 0, errf(codeInvalidParameterValue, "parameter %s: must be an integer from %d to %d, got %v", name, lo, hi, v)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, errf(codeInvalidParameterValue, "value %s for parameter %s is invalid: must be an integer from %d to %d", s, name, lo, hi)
	}
	return n, nil
}

// given reports whether the parameter name is present.
func (p params) given(name string) bool { v, ok := p[name]; return ok && v != nil }

// strs returns the list of strings name.
func (p params) strs(name string) ([]string, *apiError) {
	v, ok := p[name]
	if !ok || v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, errf(codeInvalidParameterValue, "parameter %s: must be a list of strings", name)
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, errf(codeInvalidParameterValue, "parameter %s: entry %d must be a string, got %v", name, i+1, e)
		}
		out = append(out, s)
	}
	return out, nil
}

// strMap returns the map of strings name.
func (p params) strMap(name string) (map[string]string, *apiError) {
	v, ok := p[name]
	if !ok || v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errf(codeInvalidParameterValue, "parameter %s: must be a map of strings", name)
	}
	out := make(map[string]string, len(m))
	for k, e := range m {
		s, ok := e.(string)
		if !ok {
			return nil, errf(codeInvalidParameterValue, "parameter %s.%s: must be a string, got %v", name, k, e)
		}
		out[k] = s
	}
	return out, nil
}

// entries returns the list of structures name (batch entries).
func (p params) entries(name string) ([]params, *apiError) {
	v, ok := p[name]
	if !ok || v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, errf(codeInvalidParameterValue, "parameter %s: must be a list of entries", name)
	}
	out := make([]params, 0, len(list))
	for i, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, errf(codeInvalidParameterValue, "parameter %s: entry %d must be a structure", name, i+1)
		}
		out = append(out, params(m))
	}
	return out, nil
}

// obj is an answer: fields in order. A value is a string, an int, a bool,
// an obj, a list, or a pairs.
type obj []field

type field struct {
	k string
	v any
}

// list is a list of values; in XML each is an element named item (lists
// are flattened in SQS's XML).
type list struct {
	item  string
	items []any
}

// pairs is a map: a JSON object; in XML one element named item per entry
// holding the key element and the value element (SQS's flattened maps).
type pairs struct {
	item, key, val string
	keys           []string
	vals           map[string]any
}

func newPairs(item, key, val string, m map[string]any) pairs {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return pairs{item: item, key: key, val: val, keys: keys, vals: m}
}

// writeJSON writes v as JSON, fields in order.
func writeJSON(b *bytes.Buffer, v any) {
	switch x := v.(type) {
	case obj:
		b.WriteByte('{')
		for i, f := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(b, f.k)
			b.WriteByte(':')
			writeJSON(b, f.v)
		}
		b.WriteByte('}')
	case list:
		b.WriteByte('[')
		for i, e := range x.items {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSON(b, e)
		}
		b.WriteByte(']')
	case pairs:
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(b, k)
			b.WriteByte(':')
			writeJSON(b, x.vals[k])
		}
		b.WriteByte('}')
	case string:
		writeJSONString(b, x)
	case int:
		b.WriteString(strconv.Itoa(x))
	case bool:
		b.WriteString(strconv.FormatBool(x))
	default: // no other type is built
		writeJSONString(b, fmt.Sprint(x))
	}
}

func writeJSONString(b *bytes.Buffer, s string) {
	if plain(s) {
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	b.Truncate(b.Len() - 1) // Encode's newline
}

// writeXML writes v as the content of an element.
func writeXML(b *bytes.Buffer, v any) {
	switch x := v.(type) {
	case obj:
		for _, f := range x {
			switch fv := f.v.(type) {
			case list, pairs:
				writeXML(b, fv)
			default:
				elem(b, f.k, fv)
			}
		}
	case list:
		for _, e := range x.items {
			elem(b, x.item, e)
		}
	case pairs:
		for _, k := range x.keys {
			b.WriteByte('<')
			b.WriteString(x.item)
			b.WriteByte('>')
			elem(b, x.key, k)
			elem(b, x.val, x.vals[k])
			b.WriteString("</")
			b.WriteString(x.item)
			b.WriteByte('>')
		}
	case string:
		if plain(x) {
			b.WriteString(x)
		} else {
			_ = xml.EscapeText(b, []byte(x))
		}
	case int:
		b.WriteString(strconv.Itoa(x))
	case bool:
		b.WriteString(strconv.FormatBool(x))
	default: // no other type is built
		_ = xml.EscapeText(b, []byte(fmt.Sprint(x)))
	}
}

func elem(b *bytes.Buffer, name string, v any) {
	b.WriteByte('<')
	b.WriteString(name)
	b.WriteByte('>')
	writeXML(b, v)
	b.WriteString("</")
	b.WriteString(name)
	b.WriteByte('>')
}

// plain reports whether s is printable ASCII that neither XML nor JSON
// escapes (no <, >, &, quotes or backslash): most names, ids, receipts,
// hashes and many bodies, written as they are.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e:
			return false
		case c == '<' || c == '>' || c == '&' || c == '\'' || c == '"' || c == '\\':
			return false
		}
	}
	return true
}

// proto is the wire protocol of one request.
type proto int

const (
	protoJSON proto = iota
	protoQuery
)

// writeResult answers op with out in protocol pr.
func writeResult(w http.ResponseWriter, pr proto, op, reqID string, out obj) {
	var b bytes.Buffer
	w.Header().Set("x-amzn-RequestId", reqID)
	if pr == protoJSON {
		w.Header().Set("Content-Type", jsonType)
		if out == nil {
			out = obj{}
		}
		writeJSON(&b, out)
	} else {
		w.Header().Set("Content-Type", "text/xml")
		b.WriteString(`<?xml version="1.0"?><` + op + `Response xmlns="` + xmlNS + `">`)
		if out != nil {
			elem(&b, op+"Result", out)
		}
		b.WriteString("<ResponseMetadata><RequestId>" + reqID + "</RequestId></ResponseMetadata></" + op + "Response>")
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
}

// writeError answers with e in protocol pr.
func writeError(w http.ResponseWriter, pr proto, reqID string, e *apiError) {
	var b bytes.Buffer
	w.Header().Set("x-amzn-RequestId", reqID)
	fault := "Sender"
	if e.code.server {
		fault = "Receiver"
	}
	if pr == protoJSON {
		w.Header().Set("Content-Type", jsonType)
		w.Header().Set(queryErrHdr, e.code.query+";"+fault)
		writeJSON(&b, obj{{"__type", errTypePfx + e.code.json}, {"message", e.msg}})
	} else {
		w.Header().Set("Content-Type", "text/xml")
		b.WriteString(`<?xml version="1.0"?><ErrorResponse xmlns="` + xmlNS + `"><Error><Type>` + fault + `</Type>`)
		elem(&b, "Code", e.code.query)
		elem(&b, "Message", e.msg)
		b.WriteString("<Detail/></Error><RequestId>" + reqID + "</RequestId></ErrorResponse>")
	}
	w.WriteHeader(e.code.status)
	_, _ = w.Write(b.Bytes())
}

// readBody reads at most limit bytes of the request body.
func readBody(r *http.Request, limit int64) ([]byte, *apiError) {
	var buf bytes.Buffer
	if n := r.ContentLength; n > 0 && n <= limit {
		buf.Grow(int(n) + 1) // +1: the read that finds the end
	}
	_, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1))
	body := buf.Bytes()
	if err != nil {
		return nil, errf(codeInvalidParameterValue, "read the request body: %v", err)
	}
	if int64(len(body)) > limit {
		return nil, errf(codeBatchRequestTooLong, "the request body must be at most %d bytes, got more", limit)
	}
	return body, nil
}
