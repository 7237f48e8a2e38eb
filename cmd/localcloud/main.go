// Command localcloud provisions and serves a stack of local KV stores and
// queues for development, and hands their locations to apps.
//
//	localcloud init        write a commented starter stack.yaml
//	localcloud up          provision a stack's stores and serve them until stopped
//	localcloud validate    check a stack file and list its bindings
//	localcloud env         print the environment an app needs to find its bindings
//	localcloud run         run a command with that environment
//	localcloud status      show whether up runs and the state of each binding
//	localcloud kv          get, put, delete, exists, scan the keys of a KV binding
//	localcloud queue       send, receive, ack, nack, extend, purge, peek, stats, tail, redrive
//	localcloud check       verify every store read-only: marker, schema, integrity, modes
//	localcloud backup      write a verified online snapshot of a binding's store
//	localcloud restore     replace a binding's store with a backup (up must be stopped)
//	localcloud migrate     move a binding's data to its store on another engine
//	localcloud bench       measure KV and queue throughput and latency
//	localcloud asyncapi    print the AsyncAPI document of the hint channels
//	localcloud completion  print a bash, zsh or fish completion script
//	localcloud version     print the version and build
//
// docs/CLI.md documents every command and its --json output.
//
// Exit codes: 0 success, 1 failure, 2 a usage mistake. `run` exits with its
// command's code instead (127 when it is not found).
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
