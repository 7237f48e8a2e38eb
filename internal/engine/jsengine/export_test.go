package jsengine

// SetAfterMovePublish sets the hook that runs after a move's publish was
// acknowledged and before the source is acked (the crash tests exit there).
func SetAfterMovePublish(f func(kind string)) { afterMovePublish = f }
