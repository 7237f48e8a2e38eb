package jsengine

// Read-your-writes per process.
//
// The consumer of a queue learns of stored messages asynchronously, so a
// receive right after an acknowledged publish can miss it (see Receive).
// The contract is read-your-writes for a process that just wrote, not for
// the handle that wrote: a receive must also see what another handle of
// the process sent, redrove or moved into the queue. So every due publish
// to a queue stream (sends, batch sends, dead-letter moves, redrives; not
// delayed sends, which are due later) records its stream sequence here,
// process-wide, and every handle's Receive reads the record of its stream.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// written maps "<server identity>\x00<stream>" to the highest stream
// sequence this process published to that queue stream and has not yet
// seen the consumer deliver (0: nothing to wait for).
var written sync.Map // string -> *atomic.Uint64

// serverIdentity names the server or cluster nc is connected to: the
// cluster's name, or the server's id for a server without a cluster. Two
// connections of the process to one cluster share the record of each
// stream. Streams of the same name in different accounts of one cluster
// share it too; that costs at most a receive's bounded catch-up for a
// message of the other stream, and the record is dropped once the
// receive sees it is not one of its stream's due messages.
func serverIdentity(nc *nats.Conn) string {
	if c := nc.ConnectedClusterName(); c != "" {
		return "cluster:" + c
	}
	return "server:" + nc.ConnectedServerId()
}

// writeRecord returns the process's record of the stream under identity
// ident, creating it.
func writeRecord(ident, stream string) *atomic.Uint64 {
	k := ident + "\x00" + stream
	if v, ok := written.Load(k); ok {
		return v.(*atomic.Uint64)
	}
	v, _ := written.LoadOrStore(k, new(atomic.Uint64))
	return v.(*atomic.Uint64)
}

// noteWrite records that the process published stream sequence seq to the
// queue stream (a due message).
func noteWrite(ident, stream string, seq uint64) {
	r := writeRecord(ident, stream)
	for {
		old := r.Load()
		if seq <= old || r.CompareAndSwap(old, seq) {
			return
		}
	}
}

// forgetWrite drops the record of stream if it still is seq: the consumer
// delivered it, or it is no due message of the stream any more (acked,
// purged, or the stream was deleted and re-created). A later write is kept.
func forgetWrite(ident, stream string, seq uint64) {
	writeRecord(ident, stream).CompareAndSwap(seq, 0)
}

// lastWrite is the sequence a receive of the stream waits for (0: none).
func lastWrite(ident, stream string) uint64 {
	return writeRecord(ident, stream).Load()
}

// catchUp reports whether a receive (or a redrive's pull) that got fewer
// than it asked should pull again: the process's last write to the stream,
// last, is a due message of the stream that the consumer has not yet
// delivered to anyone, seen (the highest sequence the pulls so far
// returned) is below it and deadline has not passed. It then sleeps wait
// first. When last turns out delivered, or no due message of the stream
// any more (acked, purged, a deleted and re-created stream whose sequence
// last is not one of its due messages), it drops the record, so the
// receives after it do not look again.
func (q *Queue) catchUp(ctx context.Context, last, seen uint64, deadline time.Time, wait time.Duration) bool {
	if seen >= last {
		forgetWrite(q.ident, q.stream, last)
		return false
	}
	ci, err := q.cons.Info(ctx)
	if err != nil {
		return false // what the caller has is valid; the catch-up is best effort
	}
	if ci.Delivered.Stream >= last {
		forgetWrite(q.ident, q.stream, last)
		return false
	}
	if time.Now().After(deadline) {
		return false
	}
	m, err := q.st.GetMsg(ctx, last)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && m.Subject != q.subject:
		forgetWrite(q.ident, q.stream, last)
		return false
	case err != nil:
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(wait):
		return true
	}
}
