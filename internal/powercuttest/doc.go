// Package powercuttest holds the power-cut tests of the SQLite stores: real
// processes (re-executions of the test binary) send, consume, dead-letter,
// redrive and put-if-absent on stores inside a powercut file system
// (internal/testutil/powercut); at a random moment every process is killed
// and the file system cut, and the stores left on disk are checked against
// a ledger of what each process was told. See crash_test.go. It has no
// code of its own.
package powercuttest
