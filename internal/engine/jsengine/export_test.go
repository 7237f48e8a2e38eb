package jsengine

import (
	"strconv"

	"github.com/nats-io/nats.go"
)

// SetAfterMovePublish sets the hook that runs after a move's publish was
// acknowledged and before the source is acked (the crash tests exit there).
func SetAfterMovePublish(f func(kind string)) { afterMovePublish = f }

// PendingWrite is the process's record of its last write to the queue
// name's stream on nc's server or cluster that no consumer delivery has
// confirmed yet (0: none; ryw.go).
func PendingWrite(nc *nats.Conn, name string) uint64 {
	return lastWrite(serverIdentity(nc), "LCQ_"+name)
}

// SetMaxDeleted sets the longest deleted list a presence reads (presence.go)
// and returns the previous bound.
func SetMaxDeleted(n uint64) uint64 { old := maxDeleted; maxDeleted = n; return old }

// SetAckPath sets the hook told how each Ack that returned nil got there
// ("live" or "gone", see ackPath).
func SetAckPath(f func(seq uint64, path string)) { ackPath = f }

// RefuseAck makes every ack of the message seq of the queue name's stream
// get no reply (the ack waits until its receipt's lease or its ctx ends
// and sends nothing), until undo.
func RefuseAck(name string, seq uint64) (undo func()) {
	k := "LCQ_" + name + " " + strconv.FormatUint(seq, 10)
	refusedAcks.Store(k, true)
	refusing.Add(1)
	return func() {
		refusedAcks.Delete(k)
		refusing.Add(-1)
	}
}

// SetDirectGets turns AckBatch's direct reads (direct.go) on or off and
// sets the most messages one asks for (0: keep); it returns how many
// AckBatch reads they served so far.
func SetDirectGets(on bool, batch uint64) int64 {
	directGets.Store(on)
	if batch > 0 {
		directBatch = batch
	}
	return directReads.Load()
}
