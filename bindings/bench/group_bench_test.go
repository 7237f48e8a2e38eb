package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/localcloud/localcloud/bindings/queue"
)

// BenchmarkQueueReceive10BatchAckConcurrent: 8 goroutines sharing one
// handle each loop Receive(10) then one AckBatch of the receipts, until the
// b.N pre-filled messages are gone: batch claims and batch acks of waiting
// goroutines share group commits. One op is one message; writes/commit is
// the calls (receives and acks) per transaction.
func BenchmarkQueueReceive10BatchAckConcurrent(b *testing.B) {
	const workers = 8
	dir := b.TempDir()
	prefillQueue(b, dir, b.N)
	q := openQueue(b, dir)
	ctx := context.Background()
	var acked, calls atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range workers {
		wg.Go(func() {
			receipts := make([]string, 0, queue.MaxReceiveBatch)
			for acked.Load() < int64(b.N) {
				msgs, err := q.Receive(ctx, queue.MaxReceiveBatch)
				if err != nil {
					b.Error(err)
					return
				}
				calls.Add(1)
				if len(msgs) == 0 {
					continue // the rest is in flight with the others
				}
				receipts = receipts[:0]
				for _, m := range msgs {
					receipts = append(receipts, m.ReceiptHandle)
				}
				out, err := q.AckBatch(ctx, receipts)
				if err != nil {
					b.Error(err)
					return
				}
				calls.Add(1)
				for i, o := range out {
					if o != queue.AckCurrent {
						b.Errorf("receipt %d: %v", i, o)
						return
					}
				}
				acked.Add(int64(len(msgs)))
			}
		})
	}
	wg.Wait()
	reportRate(b, b.N, "msgs/s")
	reportGroups(b, q, int(calls.Load()))
}
