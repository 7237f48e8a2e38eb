package sqlitekv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFormatDocQuotesEveryStatement keeps docs/FORMAT.md, the contract for
// programs in other languages, true: the DDL and every statement this
// package runs for get, exists, put, put-if-absent, delete and scan appear
// in it byte for byte.
func TestFormatDocQuotesEveryStatement(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "FORMAT.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, stmt := range map[string]string{
		"Schema": Schema, "stmtGet": stmtGet, "stmtExists": stmtExists, "stmtDeleteIfExp": stmtDeleteIfExp,
		"stmtPut": stmtPut, "stmtPutIfAbsent": stmtPutIfAbsent, "stmtDelete": stmtDelete, "stmtScan": stmtScan, "stmtScanAll": stmtScanAll,
	} {
		if !strings.Contains(string(doc), stmt) {
			t.Errorf("docs/FORMAT.md does not quote %s:\n%s", name, stmt)
		}
	}
}
