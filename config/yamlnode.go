package config

// The YAML node helpers of the parser: guards run before decoding, the
// decode itself, and typed reads of one node that report what they expected.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// maxFlowDepth bounds how deep flow collections ([...], {...}) nest.
// yaml.v3 parses a nest in time quadratic in its depth (up to its own limit
// of 10000), so a MaxFileSize file of deep nests took seconds and 100 MB.
const maxFlowDepth = 100

// flowDepth returns the deepest nesting of [ and { outside quoted scalars
// and comments, and the line where it was reached. It only guards decode:
// it may count a bracket of a plain scalar, never by a hundred.
func flowDepth(data []byte) (max, maxLine int) {
	depth, line := 0, 1
	var quote byte // the open quote, or 0
	comment := false
	prev := byte('\n')
	for i := 0; i < len(data); i++ {
		c := data[i]
		if c == '\n' {
			line++
			comment = false
		}
		switch {
		case comment:
		case quote == '"' && c == '\\':
			i++ // an escape in a double-quoted scalar
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '#' && (prev == ' ' || prev == '\t' || prev == '\n'):
			comment = true
		case (c == '"' || c == '\'') && strings.IndexByte(" \t\n[{,:", prev) >= 0:
			quote = c
		case c == '[' || c == '{':
			depth++
			if depth > max {
				max, maxLine = depth, line
			}
		case (c == ']' || c == '}') && depth > 0:
			depth--
		}
		prev = c
	}
	return max, maxLine
}

// notText describes the first byte that keeps data from being UTF-8 text
// without control characters (other than tab and line breaks), and its
// line; "" when there is none. Garbage is reported as such, not by its
// depth, without handing yaml.v3 a deep nest.
func notText(data []byte) (string, int) {
	line := 1
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			return fmt.Sprintf("byte 0x%02x is not UTF-8", data[i]), line
		case r == '\n':
			line++
		case r < ' ' && r != '\t' && r != '\r' || r == 0x7f:
			return fmt.Sprintf("control character 0x%02x is not allowed", r), line
		}
		i += n
	}
	return "", 0
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): `)

// decode parses data into a single YAML document and returns its top node.
func (p *parser) decode(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.addf(nil, "", "file is empty; a stack file starts with version: %d and name:", Version)
			return nil
		}
		if msg, line := notText(data); msg != "" && encodingError(err) {
			// yaml.v3 names neither the byte nor its line.
			p.addf(&yaml.Node{Line: line}, "", "invalid YAML: %s", msg)
			return nil
		}
		p.syntax(err)
		return nil
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		n := &next
		if len(next.Content) > 0 {
			n = next.Content[0]
		}
		p.addf(n, "", "a stack file holds one YAML document; found another one (remove the second ---)")
	} else if !errors.Is(err, io.EOF) {
		p.syntax(err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		p.addf(&doc, "", "file is empty; a stack file starts with version: %d and name:", Version)
		return nil
	}
	return doc.Content[0]
}

// encodingError reports whether a yaml.v3 error is about the bytes rather
// than the syntax: a control character or bad UTF-8.
func encodingError(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "control characters") || strings.Contains(msg, "UTF-8") || strings.Contains(msg, "invalid Unicode character")
}

// syntax records a YAML syntax error. yaml.v3 gives a line for most of them
// but never a column.
func (p *parser) syntax(err error) {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	pr := Problem{File: p.file}
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		pr.Line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	pr.Msg = "invalid YAML: " + msg
	p.probs = append(p.probs, pr)
}

// deref follows aliases. It returns nil for a broken alias.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i == 16 {
			return nil
		}
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = deref(n)
	return n != nil && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what a node holds, for "got ..." in messages.
func describe(n *yaml.Node) string {
	n = deref(n)
	if n == nil {
		return "a broken alias"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	case yaml.DocumentNode:
		return "a document"
	}
	return "an unknown node"
}

var simpleKeyRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// fieldPath joins a parent field path and a key, quoting keys that would not
// read well after a dot.
func fieldPath(parent, key string) string {
	if !simpleKeyRE.MatchString(key) {
		return parent + "[" + strconv.Quote(key) + "]"
	}
	if parent == "" {
		return key
	}
	return parent + "." + key
}

type entry struct {
	name     string
	key, val *yaml.Node
}

// entries returns the key/value pairs of the mapping n, reporting keys that
// are not plain strings, merge keys and duplicates. field is n's path.
func (p *parser) entries(n *yaml.Node, field string) []entry {
	seen := make(map[string]int)
	var out []entry
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		kd := deref(k)
		if kd == nil || kd.Kind != yaml.ScalarNode {
			p.addf(k, field, "keys must be strings, got %s", describe(k))
			continue
		}
		if kd.ShortTag() == "!!merge" {
			p.addf(k, field, "merge keys (<<) are not supported; write the fields out")
			continue
		}
		f := fieldPath(field, kd.Value)
		if line, dup := seen[kd.Value]; dup {
			p.addf(k, f, "duplicate key; first set on line %d", line)
			continue
		}
		seen[kd.Value] = k.Line
		out = append(out, entry{name: kd.Value, key: k, val: v})
	}
	return out
}

// unknown reports a key that is not one of known, suggesting the closest.
func (p *parser) unknown(e entry, parent string, known []string) {
	f := fieldPath(parent, e.name)
	norm := func(s string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s))
	}
	best, bestDist := "", 3 // suggest only a near miss
	for _, k := range known {
		d := editDistance(norm(k), norm(e.name))
		if d < bestDist && d < len(k)/2 {
			best, bestDist = k, d
		}
	}
	if best != "" {
		p.addf(e.key, f, "unknown field; did you mean %s?", best)
		return
	}
	p.addf(e.key, f, "unknown field; expected one of %s", strings.Join(known, ", "))
}

// mapping returns the mapping node behind v, or reports what it holds
// instead. A null value is an empty mapping.
func (p *parser) mapping(v *yaml.Node, field, what string) (*yaml.Node, bool) {
	if isNull(v) {
		return &yaml.Node{Kind: yaml.MappingNode}, true
	}
	n := deref(v)
	if n == nil || n.Kind != yaml.MappingNode {
		p.addf(v, field, "must be %s, got %s", what, describe(v))
		return nil, false
	}
	return n, true
}

// scalar returns the text of a scalar value, with ${NAME} expanded in
// strings. what says what was expected, for the message when v is a mapping
// or a list.
func (p *parser) scalar(v *yaml.Node, field, what string) (string, bool) {
	n := deref(v)
	if n == nil || n.Kind != yaml.ScalarNode {
		p.addf(v, field, "must be %s, got %s", what, describe(v))
		return "", false
	}
	switch n.ShortTag() {
	case "!!str":
		s, errs := expand(n.Value, p.lookup)
		for _, e := range errs {
			p.addf(v, field, "%s", e)
		}
		return s, len(errs) == 0
	case "!!int", "!!float", "!!bool", "!!timestamp", "!!null":
		return n.Value, true
	default:
		p.addf(v, field, "must be %s, got a value tagged %s", what, strconv.Quote(n.Tag))
		return "", false
	}
}

// str reads a string field. A null value counts as not given.
func (p *parser) str(v *yaml.Node, field, what string) (s string, given, ok bool) {
	if isNull(v) {
		return "", false, true
	}
	s, ok = p.scalar(v, field, what)
	return s, true, ok
}

// integer reads an integer field. A string that held a ${NAME} is parsed
// after expansion; any other string is the wrong type.
func (p *parser) integer(v *yaml.Node, field, what string) (int, bool) {
	n := deref(v)
	if n != nil && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
		var i int
		if err := n.Decode(&i); err != nil {
			p.addf(v, field, "must be %s, got %q", what, n.Value)
			return 0, false
		}
		return i, true
	}
	s, ok := p.scalar(v, field, what)
	if !ok {
		return 0, false
	}
	if n.ShortTag() == "!!str" && strings.Contains(n.Value, "$") {
		if i, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
			return i, true
		}
	}
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		p.addf(v, field, "must be %s, got %q, a quoted string", what, s)
	} else {
		p.addf(v, field, "must be %s, got %q", what, s)
	}
	return 0, false
}
