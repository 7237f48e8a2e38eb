package queue

// ExportParseReceipt and ExportFormatReceipt are the receipt handle codec,
// for the fuzz tests.
var (
	ExportParseReceipt  = parseReceipt
	ExportFormatReceipt = formatReceipt
)
