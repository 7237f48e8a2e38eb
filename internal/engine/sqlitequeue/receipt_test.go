package sqlitequeue_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// TestParseReceipt checks the one receipt rule: what it accepts round-trips
// through String, and each refusal is INVALID_INPUT naming the value and
// what is wrong with it.
func TestParseReceipt(t *testing.T) {
	t.Parallel()
	const u = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	for _, ok := range []string{"1:" + u, "9223372036854775807:" + u} {
		r, err := sqlitequeue.ParseReceipt(ok)
		if err != nil || r.String() != ok {
			t.Errorf("ParseReceipt(%q) = %+v, %v", ok, r, err)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"1:" + strings.ToUpper(u), "the UUID is not in lower case, as every receipt is issued (1:" + u + ")"},
		{"1:0A1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "not in lower case"},
		{"junk", `("{id}:{uuid}" as a receive returns it): there is no ":"`},
		{":" + u, "the id before \":\" is empty"},
		{"01:" + u, `the id "01" has a leading zero`},
		{"+1:" + u, `the id "+1" is not a decimal number from 1 to 9223372036854775807`},
		{"0:" + u, `the id "0" is not a decimal number`},
		{"9223372036854775808:" + u, `the id "9223372036854775808" is not a decimal number`},
		{"1:abc", `"abc" after the id is not a UUID`},
		{"1:{" + u + "}", "not in the canonical 8-4-4-4-12 lower-case form"},
		{"1:" + strings.ReplaceAll(u, "-", ""), "not in the canonical 8-4-4-4-12 lower-case form"},
		{strings.Repeat("9", 100), "it is 100 bytes, longer than the 56 of any receipt"},
	} {
		r, err := sqlitequeue.ParseReceipt(c.in)
		if err == nil {
			t.Errorf("ParseReceipt(%q) = %+v, want an error", c.in, r)
			continue
		}
		if !errors.Is(err, bindings.ErrInvalidInput) {
			t.Errorf("ParseReceipt(%q) = %v, want INVALID_INPUT", c.in, err)
		}
		quoted := c.in
		if len(quoted) > 80 {
			quoted = quoted[:80]
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || !strings.Contains(msg, quoted) || !strings.Contains(msg, "receipt: ") || !strings.Contains(msg, "{id}:{uuid}") {
			t.Errorf("ParseReceipt(%q) = %q, want it to name the value and say %q", c.in, msg, c.want)
		}
	}
}
