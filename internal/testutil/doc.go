// Package testutil holds the test helpers that the tests of several
// packages share: CheckFor, a polling wait; SyncBuffer, a buffer safe for
// concurrent writers; and StartChild, which re-executes the test binary to
// run one test function as a separate process.
//
// It is imported only by tests.
package testutil
