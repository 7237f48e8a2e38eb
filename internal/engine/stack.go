package engine

import (
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
)

// What a stack's rules make of a binding's handle, the same on every engine.
//
// Moves between the stores of a stack (dead letters, redrives) name their
// destination by its location. A store's own record of a move may come
// from anywhere (a restored file), so a destination is trusted only when
// the stack names it: a dead letter goes only to the dead-letter queue of
// the binding's current policy, a redrive only back to a queue whose
// dead-letter queue this binding is (up and the store commands finish
// those), or to the target of a running `localcloud queue redrive --to`.

// Location is what a dead-letter policy names b's store by (its engine's
// Tools.Location); "" for a binding of an engine this build lacks.
func Location(b config.Binding) string {
	t, err := For(b)
	if err != nil {
		return ""
	}
	return t.Location(b)
}

// MoveTargets returns where the stack lets binding b's store finish
// unfinished moves: the dead-letter queue of b's policy ("" without one)
// and the queues whose dead-letter queue b is, by location.
func MoveTargets(st *config.Stack, b config.Binding) (deadLetter string, origins []string) {
	if st == nil {
		return "", nil
	}
	if dl, ok := st.Binding(b.DeadLetter); ok && b.MaxAttempts > 0 && dl.Type == config.TypeQueue {
		deadLetter = Location(*dl)
	}
	for _, o := range st.DeadLetterOrigins(b.Name) {
		origins = append(origins, Location(o))
	}
	return deadLetter, origins
}

// QueueAt returns the name of the queue binding of st whose store is at
// loc, "" if none.
func QueueAt(st *config.Stack, loc string) string {
	if st == nil {
		return ""
	}
	for _, b := range st.Bindings {
		if b.Type == config.TypeQueue && Location(b) == loc {
			return b.Name
		}
	}
	return ""
}

// QueueOptions returns the options of a read-write handle on queue binding
// b of stack st, on any engine: its name, durability and default
// visibility, its dead-letter policy and the queues it may finish
// redrives toward (queue.WithMoveTargets), its retry back-off and dedup
// window.
func QueueOptions(st *config.Stack, b config.Binding) []queue.Option {
	opts := []queue.Option{queue.WithBindingName(b.Name), queue.WithDurability(bindings.Durability(b.Durability))}
	if b.VisibilityTimeout > 0 {
		opts = append(opts, queue.WithDefaultVisibility(b.VisibilityTimeout))
	}
	dl, origins := MoveTargets(st, b)
	if dl != "" {
		opts = append(opts, queue.WithDeadLetter(b.MaxAttempts, dl))
	}
	if len(origins) > 0 {
		opts = append(opts, queue.WithMoveTargets(origins...))
	}
	// config applied the defaults; a binding config did not parse (zero
	// window) keeps the queue package's.
	if b.DedupWindow > 0 {
		opts = append(opts, queue.WithDedupWindow(b.DedupWindow),
			queue.WithRetryDelay(b.RetryDelay), queue.WithMaxRetryDelay(b.MaxRetryDelay))
	}
	return opts
}

// ReadQueueOptions returns the options of a read-only handle on queue
// binding b: its name and default visibility.
func ReadQueueOptions(b config.Binding) []queue.Option {
	opts := []queue.Option{queue.WithReadOnly(), queue.WithBindingName(b.Name)}
	if b.VisibilityTimeout > 0 {
		opts = append(opts, queue.WithDefaultVisibility(b.VisibilityTimeout))
	}
	return opts
}

// KVOptions returns the options of a handle on KV binding b with access a.
func KVOptions(b config.Binding, a Access) []kv.Option {
	if a == Read {
		return []kv.Option{kv.WithReadOnly()}
	}
	return []kv.Option{kv.WithDurability(bindings.Durability(b.Durability))}
}

// QueueEnvSettings are the settings of queue binding b in its app JSON
// (every engine's), each duration as a Go duration and in milliseconds,
// for apps in any language; the dead-letter policy is the engine's to add.
func QueueEnvSettings(b config.Binding) queue.EnvSettings {
	ms := func(d time.Duration) *int64 { n := d.Milliseconds(); return &n }
	return queue.EnvSettings{
		VisibilityTimeout: b.VisibilityTimeout.String(), VisibilityTimeoutMs: ms(b.VisibilityTimeout),
		Durability: b.Durability,
		RetryDelay: b.RetryDelay.String(), RetryDelayMs: ms(b.RetryDelay),
		MaxRetryDelay: b.MaxRetryDelay.String(), MaxRetryDelayMs: ms(b.MaxRetryDelay),
		DedupWindow: b.DedupWindow.String(), DedupWindowMs: ms(b.DedupWindow),
	}
}
