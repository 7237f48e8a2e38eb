package loadgen

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
)

// kvWorker alternates a put of one of its keys (a fresh random value) and a
// get of a random key it has written, until end.
func kvWorker(ctx context.Context, s *kv.Store, prefix string, end time.Time, rec func(int, time.Time, error)) {
	value := make([]byte, ValueBytes)
	keys := make([]string, keysPerWorker)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	written := 0
	for n := 0; ctx.Err() == nil && time.Now().Before(end); n++ {
		_, _ = rand.Read(value)
		began := time.Now()
		_, err := s.Put(ctx, keys[n%len(keys)], value)
		rec(0, began, err)
		if err == nil && written < len(keys) {
			written++
		}
		if written == 0 {
			continue
		}
		began = time.Now()
		_, ok, err := s.Get(ctx, keys[mrand.IntN(written)])
		if err == nil && !ok {
			err = errors.New("get: a written key is missing")
		}
		rec(1, began, err)
	}
}

// queueWorker runs a closed loop until end: send batch messages, claim up to
// batch with one receive, ack them (each, or all in one AckBatch). The
// backlog stays around workers*batch, so latencies are not those of an
// ever-growing queue. Each payload carries its send time, for the
// send-to-receive latency.
func queueWorker(ctx context.Context, q *queue.Queue, cfg Config, end time.Time, rec func(int, time.Time, error)) {
	for ctx.Err() == nil && time.Now().Before(end) {
		for range cfg.Batch {
			sendOne(ctx, q, rec)
		}
		receiveOnce(ctx, q, cfg, rec)
	}
}

// sendWorker sends one message at a time until end (--senders).
func sendWorker(ctx context.Context, q *queue.Queue, end time.Time, rec func(int, time.Time, error)) {
	for ctx.Err() == nil && time.Now().Before(end) {
		sendOne(ctx, q, rec)
	}
}

// receiveWorker receives and acks until end (--senders: others send). An
// empty receive waits a little for the senders instead of spinning.
func receiveWorker(ctx context.Context, q *queue.Queue, cfg Config, end time.Time, rec func(int, time.Time, error)) {
	for ctx.Err() == nil && time.Now().Before(end) {
		if receiveOnce(ctx, q, cfg, rec) == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// consumeWorker runs Consume with workers handlers until end; each handled
// message records its e2e latency (Consume acks it after the handler).
func consumeWorker(ctx context.Context, q *queue.Queue, workers int, end time.Time, rec func(int, time.Time, error)) {
	cctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	err := q.Consume(cctx, func(_ context.Context, m queue.Message) error {
		recE2E(m, rec)
		return nil
	}, queue.ConsumeWorkers(workers), queue.ConsumeVisibility(time.Minute))
	if err != nil {
		rec(3, time.Now(), err)
	}
}

func sendOne(ctx context.Context, q *queue.Queue, rec func(int, time.Time, error)) {
	began := time.Now()
	err := q.Send(ctx, queue.Text(strconv.FormatInt(began.UnixNano(), 10)+strings.Repeat(".", 44)))
	rec(0, began, err)
}

// recE2E records the time from m's send to now.
func recE2E(m queue.Message, rec func(int, time.Time, error)) {
	sent, perr := strconv.ParseInt(strings.TrimRight(m.Payload.Data, "."), 10, 64)
	if perr == nil {
		rec(3, time.Unix(0, sent), nil)
	}
}

// receiveOnce claims up to cfg.Batch messages and acks them as cfg.Ack
// says; it returns how many it claimed. With --ack batch each message's ack
// latency is that of the one AckBatch.
func receiveOnce(ctx context.Context, q *queue.Queue, cfg Config, rec func(int, time.Time, error)) int {
	began := time.Now()
	msgs, err := q.Receive(ctx, cfg.Batch, queue.ReceiveVisibility(time.Minute))
	rec(1, began, err)
	for _, m := range msgs {
		recE2E(m, rec)
	}
	if cfg.Ack == AckBatch && len(msgs) > 0 {
		receipts := make([]string, len(msgs))
		for i, m := range msgs {
			receipts[i] = m.ReceiptHandle
		}
		began := time.Now()
		out, err := q.AckBatch(ctx, receipts)
		for i := range msgs {
			e := err
			if e == nil && out[i] != queue.AckCurrent {
				e = fmt.Errorf("ack batch: receipt %d: outcome %v", i, out[i])
			}
			rec(2, began, e)
		}
		return len(msgs)
	}
	for _, m := range msgs {
		began := time.Now()
		rec(2, began, q.Ack(ctx, m.ReceiptHandle))
	}
	return len(msgs)
}
