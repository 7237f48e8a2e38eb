package queue

// ExportStmtDue is the receive select, for the query-plan test.
const ExportStmtDue = stmtDue

// ExportStmtClaimOne is the one-statement claim of Receive(1).
const ExportStmtClaimOne = stmtClaimOne
