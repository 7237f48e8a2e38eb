// Package hook lets localcloud's own tools reach the engine under a public
// handle without the public packages exporting it: kv and queue set these
// functions in their init, and internal/engine/admin calls them. Apps cannot
// import this package (it is internal), so the engine stays theirs to use
// only through the public API.
package hook

// KVDriver returns the driver.Store under a *kv.Store; set by package kv.
var KVDriver func(store any) any

// QueueDriver returns the driver.Queue under a *queue.Queue; set by package
// queue.
var QueueDriver func(queue any) any
