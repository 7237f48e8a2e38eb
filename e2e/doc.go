// Package e2e drives the localcloud binary as a user would: it builds it
// once (TestMain), runs it as separate OS processes on temporary stacks and
// checks what they print, the files they leave and their exit codes. Apps
// that open bindings are this test binary re-executed with
// LOCALCLOUD_E2E_APP set.
//
// Waiting is always on an event (a log line, a process exit, a file's
// content) with a deadline, never a bare sleep. Every process a test starts
// is killed by pid when the test ends.
//
// Run the startup benchmark with
//
//	go test -run '^$' -bench UpReady -benchtime 1x ./e2e
//
// (one iteration is 10 rounds; LOCALCLOUD_BENCH_BINARY adds another build,
// interleaved).
package e2e
