// Package notify carries "message available" wake-up hints for localcloud's queue bindings.
//
// A hint says only "look at this queue now". It carries no message data, it may be lost, and no
// consumer may depend on it for correctness: the SQLite store is the truth, and every consumer
// keeps a fallback poll. Hints exist to cut the time from a send to a consumer's next receive
// from the poll interval down to well under a millisecond.
//
// # Pieces
//
//   - [Subject] names the subject of one queue binding: localcloud.<stack>.<binding>.available.
//     [Hint] is the JSON payload published on it.
//   - [Publisher] turns every "a message became due" event into at most one hint per subject per
//     window (2 ms by default), without ever dropping the trailing hint of a burst.
//     [Publisher.NotifySent] also names the largest message id the sends inserted
//     ([Hint.LastID]), so that `localcloud up` adds no hint of its own for them.
//   - [Watch] is the consumer side: it subscribes to one subject, survives the server going away
//     and coming back, and calls a wake function.
//
// This package is the client side only and links the nats.go client alone. The embedded NATS
// server (internal/hintserver), the inotify directory watcher for writers that publish no hints
// (internal/dirwatch) and the AsyncAPI document (internal/asyncapi) live in packages that only
// `localcloud up` and the CLI import, so an app never links nats-server, fsnotify or yaml.v3.
//
// # Coalescing
//
// [Publisher] and the directory watcher share one rule, applied per key (subject or directory): an event
// fires at once if nothing fired for that key within the last window (leading edge, so an
// isolated send is hinted with no added delay); otherwise one trailing fire is scheduled for the
// end of the window, and every event until then folds into it. So under any load a key fires at
// most once per window, and the last event is always followed by a fire. A pure trailing
// debounce was rejected: it delays every isolated hint by the full window and, under a steady
// stream of events closer together than the window, never fires at all.
//
// # Delivery
//
// Hints travel over core NATS: at most once, no persistence. A hint published while a consumer
// is disconnected is gone, which is why [Watch] also wakes its consumer after every
// (re)connection.
package notify
