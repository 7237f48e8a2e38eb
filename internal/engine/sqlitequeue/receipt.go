package sqlitequeue

import (
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/localcloud/localcloud/bindings"
)

// MaxReceiptBytes (queue.MaxReceiptBytes) is the length of the longest receipt a store issues: a
// 19-digit id, ":" and a 36-character UUID.
const MaxReceiptBytes = 19 + 1 + 36

// Receipt is a parsed receipt handle, "{id}:{uuid}": the row id of the
// message and the UUID its latest delivery minted.
type Receipt struct {
	ID   int64
	UUID string // canonical lower-case 8-4-4-4-12 form
}

// String formats the receipt as the store issues it.
func (r Receipt) String() string { return strconv.FormatInt(r.ID, 10) + ":" + r.UUID }

// ParseReceipt checks that s is a receipt this store could have issued and
// splits it. That is "{id}:{uuid}" with the id in decimal, positive, without
// sign or leading zero, and the UUID in the canonical lower-case
// 8-4-4-4-12 form that every receive mints; ParseReceipt(r.String())
// returns r. Anything else is INVALID_INPUT saying what is wrong.
//
// Ack and Nack use the same rule and treat a string that fails it as never
// issued: a no-op success, as the format specifies. Callers that must not
// report an ack that did not happen (the CLI) check with ParseReceipt first.
func ParseReceipt(s string) (Receipt, error) {
	bad := func(format string, args ...any) (Receipt, error) {
		return Receipt{}, bindings.Errorf(bindings.CodeInvalidInput,
			"receipt: %s is not a receipt this store issues (\"{id}:{uuid}\" as a receive returns it): "+format, append([]any{quoteReceipt(s)}, args...)...)
	}
	if len(s) > MaxReceiptBytes {
		return bad("it is %d bytes, longer than the %d of any receipt", len(s), MaxReceiptBytes)
	}
	idStr, u, found := strings.Cut(s, ":")
	if !found {
		return bad(`there is no ":"`)
	}
	id, err := strconv.ParseInt(idStr, 10, 64)
	switch {
	case idStr == "":
		return bad(`the id before ":" is empty`)
	case len(idStr) > 1 && idStr[0] == '0':
		return bad("the id %q has a leading zero", idStr)
	case err != nil || id <= 0 || strconv.FormatInt(id, 10) != idStr:
		return bad("the id %q is not a decimal number from 1 to %d without sign", idStr, int64(1<<63-1))
	}
	parsed, err := uuid.Parse(u)
	switch canon := parsed.String(); {
	case err != nil:
		return bad("%q after the id is not a UUID (8-4-4-4-12 hex digits)", u)
	case canon == u:
		return Receipt{ID: id, UUID: u}, nil
	case strings.ToLower(u) == canon:
		return bad("the UUID is not in lower case, as every receipt is issued (%s)", Receipt{id, canon})
	default:
		return bad("the UUID %q is not in the canonical 8-4-4-4-12 lower-case form receipts are issued in", u)
	}
}

// quoteReceipt quotes s for an error, cut to 80 bytes: a receipt given on a
// command line may be anything.
func quoteReceipt(s string) string {
	if len(s) <= 80 {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:80]) + "..."
}

// newReceipt mints the receipt of a delivery of message id: one string,
// "{id}:{uuid}", and its uuid part (a substring of it, no copy).
func newReceipt(id int64) (receipt, u string) {
	var buf [MaxReceiptBytes]byte
	b := strconv.AppendInt(buf[:0], id, 10)
	b = append(b, ':')
	n := len(b)
	b = appendUUID(b, uuid.New())
	receipt = string(b)
	return receipt, receipt[n:]
}

// appendUUID appends u in the canonical lower-case 8-4-4-4-12 form, as
// u.String() writes it.
func appendUUID(b []byte, u uuid.UUID) []byte {
	var s [36]byte
	hex.Encode(s[:8], u[:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return append(b, s[:]...)
}

// canonicalReceipt splits s when it is a receipt as the store issues it
// (ParseReceipt's rule), without allocating: the ack path's common case.
// false: ParseReceipt says what is wrong, if anything.
func canonicalReceipt(s string) (id int64, u string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i < 1 || i > 19 || len(s)-i-1 != 36 || s[0] == '0' {
		return 0, "", false
	}
	for _, c := range []byte(s[:i]) {
		if c < '0' || c > '9' {
			return 0, "", false
		}
	}
	id, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, "", false
	}
	u = s[i+1:]
	for j, c := range []byte(u) {
		switch j {
		case 8, 13, 18, 23:
			if c != '-' {
				return 0, "", false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return 0, "", false
			}
		}
	}
	return id, u, true
}
