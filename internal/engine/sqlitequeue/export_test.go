package sqlitequeue

// Hooks for this package's tests (sqlitequeue_test).

// SetMaxMovesPerClaim sets the cap of dead letters one claim starts. For
// the crash test's helper process only: it is not safe while handles are in
// use.
func SetMaxMovesPerClaim(n int) { maxMovesPerClaim = n }

// ParseReceiptParts and FormatReceipt are the receipt handle codec, for the
// fuzz tests.
var (
	ParseReceiptParts = parseReceipt
	FormatReceipt     = formatReceipt
)

// StmtClaimOne is the one-statement claim of Receive(1).
const StmtClaimOne = stmtClaimOne

// StmtClaimBatch is the one-statement claim of n messages, for the
// query-plan test.
var StmtClaimBatch = stmtClaimBatch
