// Command localcloud provisions and serves a stack of local KV stores and
// queues for development, and hands their locations to apps.
//
//	localcloud up        provision a stack's stores and serve them until stopped
//	localcloud validate  check a stack file and list its bindings
//	localcloud env       print the environment an app needs to find its bindings
//	localcloud run       run a command with that environment
//	localcloud status    show whether up runs and the state of each binding
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
