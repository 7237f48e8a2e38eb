package queue

import (
	"strconv"

	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// MaxReceiptBytes is the length of the longest receipt the SQLite engine
// issues: a 19-digit id, ":" and a 36-character UUID.
const MaxReceiptBytes = 19 + 1 + 36

// Receipt is a parsed receipt handle of the SQLite engine, "{id}:{uuid}":
// the row id of the message and the UUID its latest delivery minted.
type Receipt struct {
	ID   int64
	UUID string // canonical lower-case 8-4-4-4-12 form
}

// String formats the receipt as the store issues it.
func (r Receipt) String() string { return strconv.FormatInt(r.ID, 10) + ":" + r.UUID }

// ParseReceipt checks that s is a receipt the SQLite engine could have
// issued and splits it. That is "{id}:{uuid}" with the id in decimal,
// positive, without sign or leading zero, and the UUID in the canonical
// lower-case 8-4-4-4-12 form that every receive mints;
// ParseReceipt(r.String()) returns r. Anything else is INVALID_INPUT saying
// what is wrong. The rule is the engine's own: Ack and Nack use it and
// treat a string that fails it as never issued, a no-op success, as the
// format specifies. Callers that must not report an ack that did not
// happen (the CLI) check with ParseReceipt first.
func ParseReceipt(s string) (Receipt, error) {
	r, err := sqlitequeue.ParseReceipt(s)
	return Receipt{ID: r.ID, UUID: r.UUID}, err
}
