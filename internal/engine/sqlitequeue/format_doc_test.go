package sqlitequeue

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/internal/sqlstore"
)

// TestFormatDocQuotesEveryStatement keeps docs/FORMAT.md, the contract for
// programs in other languages, true: every DDL and statement this package
// runs for send, claim, ack, nack, extend, delay and purge appears in it
// byte for byte.
func TestFormatDocQuotesEveryStatement(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "FORMAT.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, stmt := range map[string]string{
		"MetaDDL": sqlstore.MetaDDL, "Schema": Schema, "Indexes": Indexes,
		"stmtSend": stmtSend, "stmtSendAt": stmtSendAt, "stmtAny": stmtAny, "stmtDue": stmtDue,
		"stmtClaimOne": stmtClaimOne, "stmtClaim": stmtClaim, "stmtAck": stmtAck, "stmtNack": stmtNack,
		"stmtExists": stmtExists, "stmtPurge": stmtPurge, "stmtStats": stmtStats,
		"stmtClaimBatch(2)": stmtClaimBatch(2),
	} {
		if !strings.Contains(string(doc), stmt) {
			t.Errorf("docs/FORMAT.md does not quote %s:\n%s", name, stmt)
		}
	}
}
