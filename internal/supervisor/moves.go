package supervisor

import (
	"fmt"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"slices"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
)

// Moves between the stores of a stack (dead letters, redrives) are
// recorded in the store the message leaves (lc_moves), with their
// destination. That file may come from anywhere (a restore), so a
// destination is trusted only when the stack names it: a dead letter goes
// only to the dead-letter queue of the binding's current policy, a redrive
// only back to a queue whose dead-letter queue this binding is (up and the
// store commands finish those), or to the target of a running
// `localcloud queue redrive --to`. Everything else is left in place and
// reported by check, status and up.

// MoveTargets returns where the stack lets binding b's store finish
// unfinished moves: the dead-letter queue of b's policy ("" without one)
// and the queues whose dead-letter queue b is, by location.
func MoveTargets(st *config.Stack, b config.Binding) (deadLetter string, origins []string) {
	if dl, ok := st.Binding(b.DeadLetter); ok && b.MaxAttempts > 0 && dl.Type == config.TypeQueue {
		deadLetter = Location(*dl)
	}
	for _, o := range st.DeadLetterOrigins(b.Name) {
		origins = append(origins, Location(o))
	}
	return deadLetter, origins
}

// Location is what a dead-letter policy names binding b's store by: its
// folder on the sqlite engine, its name on jetstream (the engine's
// location; config keeps a dead-letter pair on one engine).
func Location(b config.Binding) string {
	if b.Engine == config.EngineJetStream {
		return b.Name
	}
	return b.Path
}

// QueueOptions returns the options that give a handle on queue binding b
// the stack's rules for moves: its dead-letter policy and the queues it
// may finish redrives toward (queue.WithMoveTargets).
func QueueOptions(st *config.Stack, b config.Binding) []queue.Option {
	dl, origins := MoveTargets(st, b)
	var opts []queue.Option
	if dl != "" {
		opts = append(opts, queue.WithDeadLetter(b.MaxAttempts, dl))
	}
	if len(origins) > 0 {
		opts = append(opts, queue.WithMoveTargets(origins...))
	}
	// Every process of the stack applies the binding's retry back-off and
	// dedup window (config applied the defaults).
	// A binding config did not parse (zero window) keeps the defaults.
	if b.DedupWindow > 0 {
		opts = append(opts, queue.WithDedupWindow(b.DedupWindow),
			queue.WithRetryDelay(b.RetryDelay), queue.WithMaxRetryDelay(b.MaxRetryDelay))
	}
	return opts
}

// MoveProblems returns, one line each, the unfinished moves among refs
// (the References of binding b's store) that up would leave in place:
// their destination is not one the stack lets b finish moves toward
// (MoveTargets).
func MoveProblems(st *config.Stack, b config.Binding, refs []sqlitequeue.Reference) []string {
	dl, origins := MoveTargets(st, b)
	var out []string
	for _, r := range refs {
		if r.Table != "lc_moves" {
			continue
		}
		var why string
		switch {
		case r.Kind == sqlitequeue.MoveDeadLetter && dl == "":
			why = fmt.Sprintf("binding %s has no dead-letter policy", b.Name)
		case r.Kind == sqlitequeue.MoveDeadLetter && r.Location != dl:
			why = fmt.Sprintf("the dead-letter policy of %s names %s (%s)", b.Name, b.DeadLetter, dl)
		case r.Kind == sqlitequeue.MoveDeadLetter:
			continue
		case r.Kind == sqlitequeue.MoveRedrive && slices.Contains(origins, r.Location):
			continue
		case r.Kind == sqlitequeue.MoveRedrive:
			if name := queueAt(st, r.Location); name != "" {
				why = fmt.Sprintf("%s is no queue that dead-letters into %s; `localcloud queue redrive %s --to %s` finishes it", name, b.Name, b.Name, name)
			} else {
				why = "it is no queue binding of the stack"
			}
		default:
			why = fmt.Sprintf("unknown kind of move %q", r.Kind)
		}
		out = append(out, fmt.Sprintf("%d unfinished %s move(s) toward %s left in place (hidden in this queue, not dropped): %s",
			r.Count, r.Kind, r.Location, why))
	}
	return out
}

// ForeignReferences returns, one line each, the locations among refs (the
// References of a store file meant for binding b) that are no other queue
// binding of the stack: restore refuses such a file, since a move or a
// redrive would write there.
func ForeignReferences(st *config.Stack, b config.Binding, refs []sqlitequeue.Reference) []string {
	var out []string
	for _, r := range refs {
		if name := queueAt(st, r.Location); name != "" && name != b.Name {
			continue
		}
		what := "unfinished " + r.Kind + " move(s) toward"
		if r.Table != "lc_moves" {
			what = "dead letter(s) whose recorded origin, where a redrive sends them, is"
		}
		out = append(out, fmt.Sprintf("%s: %d %s %q, which is no other queue binding of stack %s", r.Table, r.Count, what, r.Location, st.Name))
	}
	return out
}

// queueAt returns the name of the queue binding stored at loc, "" if none.
func queueAt(st *config.Stack, loc string) string {
	for _, b := range st.Bindings {
		if b.Type == config.TypeQueue && b.Path == loc {
			return b.Name
		}
	}
	return ""
}
