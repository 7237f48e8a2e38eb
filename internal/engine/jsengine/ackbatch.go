package jsengine

// AckBatch: JetStream acks one delivery per request, so a batch is many
// acks; it keeps the driver's contract (an error means none was acked) by
// reading before it acks and by never failing once an ack was sent.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// AckBatch decides each receipt's outcome as Ack decides it, in two steps.
//
// First it reads, and acks nothing: whether each message is still stored
// comes from one stream read for the whole batch (a presence,
// presence.go), or when the stream's deleted list is too long for that
// from batched direct gets on a stream of one replica (direct.go), else a
// get each. An error here is AckBatch's error, and none was acked. A
// receipt twice in one batch, or two receipts of one message, ack it once:
// the later ones are AckGone.
//
// Then each live receipt's ack, concurrently. From here on AckBatch returns
// no error once an ack of the batch was confirmed: an ack without a reply
// (the connection lost, the consumer's leader moving, the reply lost) is
// settled by reading the stream (ackOne): deleted is AckCurrent, still
// stored with the lease over is AckStale, still stored and live is acked
// again. One that cannot be settled before ctx ends (or ackSettle after
// its failure: the stream unreadable) is AckStale, with Ack's caveat for an
// ack that returned an error: it may still take effect, if it reaches the
// server before the lease ends. AckBatch returns an error only when no ack
// was confirmed and one could not be settled. On a replicated stream it
// then waits until the stream no longer holds the acked messages, as Ack
// does (one stream read per check for all of them); a removal not seen
// within ackSettle is no error (the acks were confirmed).
func (q *Queue) AckBatch(ctx context.Context, receipts []string) ([]driver.AckOutcome, error) {
	if err := q.check(true); err != nil {
		return nil, err
	}
	out := make([]driver.AckOutcome, len(receipts))
	rs := make([]receipt, len(receipts))
	live := make([]bool, len(receipts))
	var idx []int // parsed receipts
	for i, s := range receipts {
		r, ok := q.parseReceipt(s)
		if !ok {
			out[i] = driver.AckGone // never issued: a no-op, as the format specifies
			continue
		}
		rs[i] = r
		idx = append(idx, i)
	}
	if len(idx) == 0 {
		return out, nil
	}
	q.confirmServer(ctx)
	for _, i := range idx {
		live[i] = q.live(ctx, receipts[i], rs[i])
	}
	// Is each message still stored: a live receipt acked already, by a
	// handle that shared it, or purged, is gone, and JetStream would take
	// a second +ACK without a word. The first live receipt of a message
	// acks it; later receipts of it in the batch are gone.
	held, err := q.held(ctx, idx, rs)
	if err != nil {
		return nil, err
	}
	first := make(map[uint64]int, len(idx))
	var toAck []int
	for _, i := range idx {
		_, dup := first[rs[i].seq]
		switch {
		case !held[i]:
			out[i] = driver.AckGone
		case !live[i]:
			out[i] = driver.AckStale
		case dup:
			out[i] = driver.AckGone // acked by its first receipt in the batch
		default:
			first[rs[i].seq] = i
			toAck = append(toAck, i)
		}
	}
	acked := make([]bool, len(receipts))
	var (
		mu        sync.Mutex
		confirmed bool
		unsettled error
	)
	_ = parallel(len(toAck), func(k int) error {
		i := toAck[k]
		o, ok, err := q.ackOne(ctx, receipts[i], rs[i])
		mu.Lock()
		defer mu.Unlock()
		out[i], acked[i] = o, ok
		confirmed = confirmed || ok
		if err != nil && unsettled == nil {
			unsettled = err
		}
		return nil
	})
	if unsettled != nil && !confirmed {
		return nil, unsettled
	}
	if !q.replicated || !confirmed {
		return out, nil
	}
	var seqs []uint64
	for i, a := range acked {
		if a {
			seqs = append(seqs, rs[i].seq)
		}
	}
	_ = q.waitAllGone(ctx, seqs) // the acks were confirmed: no error now
	return out, nil
}

// held reads whether the stream still holds the message of each receipt
// rs[i], i in idx: one presence for the batch; when the stream's deleted
// list is too long for one, batched direct gets (direct.go); else a get
// each.
func (q *Queue) held(ctx context.Context, idx []int, rs []receipt) ([]bool, error) {
	held := make([]bool, len(rs))
	var p *presence
	if len(idx) > 1 {
		var err error
		if p, err = q.readPresence(ctx); err != nil {
			return nil, err
		}
	}
	if p != nil {
		for _, i := range idx {
			held[i] = p.holds(rs[i].seq)
		}
		return held, nil
	}
	if len(idx) > 1 {
		seqs := make([]uint64, len(idx))
		for k, i := range idx {
			seqs[k] = rs[i].seq
		}
		h, ok, err := q.directHeld(ctx, seqs) // direct.go
		if err != nil {
			return nil, err
		}
		if ok {
			for k, i := range idx {
				held[i] = h[k]
			}
			return held, nil
		}
	}
	err := parallel(len(idx), func(k int) error {
		i := idx[k]
		ok, err := q.exists(ctx, rs[i].seq)
		held[i] = ok
		return err
	})
	return held, err
}

// ackOne acks the live receipt s (parsed: r) for AckBatch: its outcome,
// whether this call's ack was confirmed, and an error only for an ack that
// could not be settled (see AckBatch).
func (q *Queue) ackOne(ctx context.Context, s string, r receipt) (driver.AckOutcome, bool, error) {
	if !q.live(ctx, s, r) { // stale by now
		return driver.AckStale, false, nil
	}
	err := q.ackLive(ctx, s, r)
	settle := time.Now().Add(ackSettle)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		switch {
		case err == nil:
			return driver.AckCurrent, true, nil
		case errors.Is(err, driver.ErrStaleReceipt):
			return driver.AckStale, false, nil // no server took it (requestAck)
		case ctx.Err() != nil || time.Now().After(settle):
			return driver.AckStale, false, err
		}
		// No reply: whether the ack took effect shows in the stream.
		rctx, cancel := context.WithTimeout(ctx, readTry)
		stored, rerr := q.exists(rctx, r.seq)
		cancel()
		switch {
		case rerr == nil && !stored:
			return driver.AckCurrent, false, nil // deleted: by this ack, its reply lost, or meanwhile
		case rerr == nil && !q.live(ctx, s, r):
			return driver.AckStale, false, nil // still stored, the lease over: delivered again
		case rerr == nil:
			err = q.ackLive(ctx, s, r) // still stored and live: ack again
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// parallel runs f(0..n-1) concurrently, at most 16 at a time, and returns
// the first error.
func parallel(n int, f func(k int) error) error {
	if n == 1 {
		return f(0)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, 16)
	for k := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(k); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}
