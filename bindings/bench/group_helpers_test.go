package bench

import (
	"testing"

	"github.com/localcloud/localcloud/bindings/queue"
)

// reportGroups reports how many of n single-statement writes shared one
// transaction on average (1 without group commit).
func reportGroups(b *testing.B, q *queue.Queue, n int) {
	if c := dbOf(b, q).GroupCommits(); c > 0 {
		b.ReportMetric(float64(n)/float64(c), "writes/commit")
	}
}
