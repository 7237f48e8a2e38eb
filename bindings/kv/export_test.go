package kv

// ExportValidKey, ExportEncodeCursor and ExportDecodeCursor are the key
// rule and the Scan cursor codec, for the fuzz tests.
var (
	ExportValidKey     = validKey
	ExportEncodeCursor = encodeCursor
	ExportDecodeCursor = decodeCursor
)
