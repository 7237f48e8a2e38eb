package queue

// ExportStmtDue is the receive select, for the query-plan test.
const ExportStmtDue = stmtDue
