package jsengine

// SetAfterMovePublish sets the hook that runs after a move's publish was
// acknowledged and before the source is acked (the crash tests exit there).
func SetAfterMovePublish(f func(kind string)) { afterMovePublish = f }

// SetMaxDeleted sets the longest deleted list a presence reads (presence.go)
// and returns the previous bound.
func SetMaxDeleted(n uint64) uint64 { old := maxDeleted; maxDeleted = n; return old }
