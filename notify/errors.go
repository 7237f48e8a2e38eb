package notify

import "errors"

// Errors returned by this package. Returned errors wrap them with context; test with errors.Is.
var (
	// ErrInvalidName means a stack or binding name cannot be used as one NATS subject token.
	ErrInvalidName = errors.New("invalid name")

	// ErrClosed means the Publisher was already closed.
	ErrClosed = errors.New("closed")
)
