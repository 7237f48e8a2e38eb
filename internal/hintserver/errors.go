package hintserver

import "errors"

// Errors returned by this package. Returned errors wrap them with context; test with errors.Is.
var (
	// ErrAddrInUse means the hint server's listen address is already taken by another process.
	ErrAddrInUse = errors.New("address already in use")

	// ErrInvalidAddr means a listen address is not of the form host:port with a numeric port.
	ErrInvalidAddr = errors.New("invalid listen address")

	// ErrNotReady means the embedded NATS server did not start accepting clients in time.
	ErrNotReady = errors.New("hint server not ready")
)
