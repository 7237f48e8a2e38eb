// Package hintserver is the embedded NATS server that `localcloud up` runs for wake-up hints
// ([StartServer]). It listens on loopback by default, never installs signal handlers and routes
// its logs to slog.
//
// It is the only package that links nats-server. Only `up` (cmd/localcloud) and tests import it,
// so an app that uses the bindings links the nats.go client alone (see notify).
package hintserver
