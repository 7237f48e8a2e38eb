package sqlitequeue

import (
	"strings"
	"testing"
)

// TestNewReceiptIsCanonical: a minted receipt parses back, and its uuid
// part is what the claim stores.
func TestNewReceiptIsCanonical(t *testing.T) {
	for _, id := range []int64{1, 99, 100, 1 << 40, 1<<63 - 1} {
		r, u := newReceipt(id)
		rc, err := ParseReceipt(r)
		if err != nil || rc.ID != id || rc.UUID != u {
			t.Fatalf("newReceipt(%d) = %q, %q: parsed %+v, %v", id, r, u, rc, err)
		}
	}
}

// TestCanonicalReceiptAgreesWithParseReceipt: the allocation-free split
// accepts exactly what ParseReceipt accepts, among canonical receipts and
// near misses.
func TestCanonicalReceiptAgreesWithParseReceipt(t *testing.T) {
	r, _ := newReceipt(12345)
	cases := []string{r, "1:" + r[6:], "0:" + r[6:], "01:" + r[6:], "-1:" + r[6:], "+1:" + r[6:],
		"12345:" + strings.ToUpper(r[6:]), "12345" + r[5:len(r)-1], "12345:" + r[6:] + "0",
		"9223372036854775807:" + r[6:], "9223372036854775808:" + r[6:], "12345:" + strings.ReplaceAll(r[6:], "-", "x"),
		"", ":", "12345", "12345:"}
	for _, s := range cases {
		id, u, ok := canonicalReceipt(s)
		rc, err := ParseReceipt(s)
		if ok && (err != nil || rc.ID != id || rc.UUID != u) {
			t.Errorf("canonicalReceipt(%q) = %d, %q; ParseReceipt: %+v, %v", s, id, u, rc, err)
		}
		if !ok && err == nil {
			t.Errorf("canonicalReceipt(%q) refused what ParseReceipt accepts", s)
		}
	}
}
