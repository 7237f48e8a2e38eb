package jsengine_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// BenchmarkFailure is the cost of recording a failure (driver.FailureRecorder):
// one message received and nacked without a delay, again and again, with
// Nack ("nack") and with NackFailed and a 200-byte error ("nackFailed");
// the difference is the side-stream publish with its PubAck.
// Run: go test -run '^$' -bench Failure -benchtime 300x ./internal/engine/jsengine
func BenchmarkFailure(b *testing.B) {
	text := string(make([]byte, 200))
	for _, mode := range []string{"nack", "nackFailed"} {
		b.Run(mode, func(b *testing.B) {
			q, err := jsengine.QueueEngine{Conn: connectB(b, node.url)}.Open(context.Background(), driver.Config{Location: freshName("bf"),
				Clock: time.Now, Logger: slog.Default()})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			fr := q.(driver.FailureRecorder)
			if _, err := q.Send(bg, []driver.Payload{{Type: "text", Data: "m"}}, 0); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				ms, err := q.Receive(bg, 1, 10*time.Second)
				if err != nil || len(ms) != 1 {
					b.Fatalf("Receive = %d, %v", len(ms), err)
				}
				if mode == "nack" {
					err = q.Nack(bg, ms[0].ReceiptHandle, 0)
				} else {
					err = fr.NackFailed(bg, ms[0].ReceiptHandle, 0, text)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
