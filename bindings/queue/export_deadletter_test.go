package queue

// ExportSetMaxMovesPerClaim sets the cap of dead letters one claim starts.
// For the crash test's helper process only: it is not safe while handles
// are in use.
func ExportSetMaxMovesPerClaim(n int) { maxMovesPerClaim = n }
