package queue_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// storedPayload returns payload_data of the only message, read with plain
// SQL: the bytes in the file.
func storedPayload(t *testing.T, dir string) string {
	t.Helper()
	db := rawDB(t, filepath.Join(dir, sqlitequeue.FileName))
	var data string
	if err := db.QueryRow(`SELECT payload_data FROM messages`).Scan(&data); err != nil {
		t.Fatal(err)
	}
	return data
}

// TestJSONNotHTMLEscaped checks that queue.JSON stores the compact form
// another implementation (serde_json) writes: <, >, & and U+2028/U+2029 as
// they are, not as \u003c... escapes, so the 64 KiB limit counts the real
// size. A value whose compact form is exactly 65536 bytes of mostly "<" is
// accepted and stored byte for byte; one byte more is refused.
func TestJSONNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	type doc struct {
		S string `json:"s"`
	}
	const wrap = len(`{"s":""}`)

	dir := t.TempDir()
	q := openFile(t, dir)
	v := doc{S: strings.Repeat("<", queue.MaxPayloadBytes-wrap-2) + "&>"}
	want := `{"s":"` + v.S + `"}`
	if len(want) != queue.MaxPayloadBytes {
		t.Fatalf("test value is %d bytes compact, want %d", len(want), queue.MaxPayloadBytes)
	}
	if p := queue.JSON(v); p.Data != want {
		t.Errorf("JSON(v).Data is %d bytes, want the %d-byte compact form; starts %.40q", len(p.Data), len(want), p.Data)
	}
	if err := q.Send(ctx, queue.JSON(v)); err != nil {
		t.Fatalf("Send of a %d-byte compact value: %v", len(want), err)
	}
	if got := storedPayload(t, dir); got != want {
		t.Errorf("stored %d bytes, want the %d-byte compact form; starts %.40q", len(got), len(want), got)
	}

	over := doc{S: v.S + "<"}
	err := q.Send(ctx, queue.JSON(over))
	wantCode(t, err, bindings.ErrInvalidInput, "at most 65536 bytes", "got 65537 bytes")

	// The other characters encoding/json escapes by default, and what
	// must stay escaped: a quote, a backslash, control characters, and a
	// literal backslash before "u2028".
	cases := []struct {
		in   any
		want string
	}{
		{map[string]string{"a": "<b>&amp;</b>"}, `{"a":"<b>&amp;</b>"}`},
		{[]string{"line\u2028sep\u2029"}, "[\"line\u2028sep\u2029\"]"},
		{[]string{`\u2028`, "\\\u2028", "\"\n\x01"}, `["\\u2028","\\` + "\u2028" + `","\"\n\u0001"]`},
		{rawMarshaler{}, `{"x":"<&>"}`},
	}
	for _, c := range cases {
		if got := queue.JSON(c.in).Data; got != c.want {
			t.Errorf("JSON(%#v).Data = %q, want %q", c.in, got, c.want)
		}
	}
}

// rawMarshaler's own JSON is compacted, not escaped.
type rawMarshaler struct{}

func (rawMarshaler) MarshalJSON() ([]byte, error) { return []byte(`{ "x" : "<&>" }`), nil }

// FuzzJSONString checks that a string payload serializes to valid JSON that
// decodes back to the string (each byte of invalid UTF-8 becomes U+FFFD,
// as encoding/json does), with no HTML or line-separator escapes.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{"", "<>&", "\u2028\u2029", `\u2028`, "\\\u2028", "\\\\\u2029", "a\"b\\c\n\x00", "\xff<"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := queue.JSON(s)
		var back string
		if err := p.Decode(&back); err != nil {
			t.Fatalf("JSON(%q).Data = %q does not decode: %v", s, p.Data, err)
		}
		if want := string([]rune(s)); back != want { // each invalid byte is one U+FFFD

			t.Fatalf("JSON(%q).Data = %q decodes to %q", s, p.Data, back)
		}
		for _, esc := range []string{`\u003c`, `\u003e`, `\u0026`} {
			if strings.Contains(p.Data, esc) {
				t.Fatalf("JSON(%q).Data = %q holds the escape %s", s, p.Data, esc)
			}
		}
		if n := strings.Count(p.Data, `\u2028`) + strings.Count(p.Data, `\u2029`); n > strings.Count(p.Data, `\\u202`) {
			t.Fatalf("JSON(%q).Data = %q escapes a line separator", s, p.Data)
		}
	})
}
