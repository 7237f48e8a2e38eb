package jsengine

import "github.com/nats-io/nats.go"

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
