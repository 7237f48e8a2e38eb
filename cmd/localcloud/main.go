// Command localcloud provisions and serves a stack of local KV stores and
// queues for development, and hands their locations to apps.
//
//	localcloud up        provision a stack's stores and serve them until stopped
//	localcloud validate  check a stack file and list its bindings
//	localcloud env       print the environment an app needs to find its bindings
//	localcloud run       run a command with that environment
//	localcloud status    show whether up runs and the state of each binding
//	localcloud kv        get, put, delete, exists, scan the keys of a KV binding
//	localcloud queue     send, receive, ack, nack, purge, peek, stats a queue binding
//	localcloud check     verify every store read-only: marker, schema, integrity, modes
//	localcloud backup    write a verified online snapshot of a binding's store
//	localcloud restore   replace a binding's store with a backup (up must be stopped)
//	localcloud bench     measure KV and queue throughput and latency
//
// docs/CLI.md documents the store commands and their --json output.
//
// Exit codes: 0 success, 1 failure, 2 a usage mistake. `run` exits with its
// command's code instead.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
