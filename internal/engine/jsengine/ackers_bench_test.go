package jsengine_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue"
)

// BenchmarkAckers measures what more than one AckBatch in flight would
// give Consume, whose acker sends one batch at a time (bindings/queue
// consume.go; not changed here). A model of Consume's drain, not Consume:
// a claimer that receives up to as many messages as workers are idle, 8
// workers whose handler returns at once, and 1 or 4 ackers that each take
// what has queued (up to 10) and AckBatch it (ackers=0: claims only, no
// ack: what the claimer alone allows); the engine rows of
// BenchmarkVsBare's consume otherwise. Prints messages/s per (R, ackers),
// medians of LC_BENCH_ROUNDS rounds of 2*LC_BENCH_N messages.
// Run: go test -run '^$' -bench Ackers ./internal/engine/jsengine
func BenchmarkAckers(b *testing.B) {
	type setup struct {
		r   int
		url string
	}
	setups := []setup{{1, node.url}}
	if !testing.Short() {
		setups = append(setups, setup{3, startCluster(b)})
	}
	var out string
	for _, su := range setups {
		nc := connectB(b, su.url, nats.DontRandomize())
		q, js, _, _ := openBenchQueue(b, nc, su.r)
		ec := engineConsumer(b, js, q)
		for _, ackers := range []int{1, 4, 0} {
			if ackers == 0 { // claims only, on a queue of its own (nothing is acked)
				q, js, _, _ = openBenchQueue(b, nc, su.r)
				ec = engineConsumer(b, js, q)
			}
			var rates []float64
			for range benchRounds {
				n, d := drainModel(b, q, ec, 2*benchN, ackers)
				rates = append(rates, float64(n)/d.Seconds())
			}
			out += fmt.Sprintf("R%d ackers=%d %8.0f msgs/s\n", su.r, ackers, median(rates))
		}
	}
	fmt.Print("\n" + out)
}

func drainModel(b *testing.B, q *queue.Queue, ec jetstream.Consumer, n, ackers int) (int, time.Duration) {
	const workers = 8
	preloadEngine(b, q, n)
	waitPending(b, ec, n)
	jobs := make(chan queue.Message, workers)
	free := make(chan struct{}, workers)
	acks := make(chan queue.Message, n)
	var wg, awg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range jobs {
				acks <- m
				free <- struct{}{}
			}
		}()
	}
	var ackedMu sync.Mutex
	acked := 0
	done := make(chan struct{})
	for range max(ackers, 1) {
		awg.Add(1)
		go func() {
			defer awg.Done()
			for {
				var m queue.Message
				select {
				case m = <-acks:
				case <-done:
					return
				}
				rs := []string{m.ReceiptHandle}
			more:
				for len(rs) < queue.MaxReceiveBatch {
					select {
					case m := <-acks:
						rs = append(rs, m.ReceiptHandle)
					default:
						break more
					}
				}
				if ackers == 0 {
				} else if _, err := q.AckBatch(bg, rs); err != nil {
					b.Error(err)
				}
				ackedMu.Lock()
				acked += len(rs)
				if acked == n {
					close(done)
				}
				ackedMu.Unlock()
			}
		}()
	}
	idle, claimed := workers, 0
	for claimed < n {
		if idle == 0 {
			<-free
			idle++
		}
		for drained := false; !drained; {
			select {
			case <-free:
				idle++
			default:
				drained = true
			}
		}
		ms, err := q.Receive(bg, min(idle, n-claimed))
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range ms {
			idle--
			claimed++
			jobs <- m
		}
		if len(ms) == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	close(jobs)
	wg.Wait()
	awg.Wait()
	return n, time.Since(start)
}
