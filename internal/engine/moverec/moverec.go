// Package moverec holds what `localcloud migrate` carries from a queue of
// one engine to a queue of another: the records both engines export and
// import (internal/engine's Handle does it through them). A leaf package:
// the engines, which the public packages import, cannot import
// internal/engine.
package moverec

import (
	"time"

	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// Message is one queue message as stored, with what it carries beyond its
// payload.
type Message struct {
	// ID is its id in the store it was exported from: with the source's
	// name, what makes an import idempotent.
	ID         int64
	Payload    driver.Payload
	EnqueuedAt time.Time
	// DueAt is when a delayed message becomes due; zero: due now.
	DueAt time.Time
	// Attempts is how many deliveries it had.
	Attempts int
	// LastError is the error of its last failed delivery; "" for none.
	LastError string
	// Origin is where a dead letter came from; nil for other messages.
	Origin *driver.Origin
}

// Dedup is a dedup key a queue remembers: sent at SentAt, so a send of it
// adds nothing until SentAt plus the queue's window.
type Dedup struct {
	Key    string
	SentAt time.Time
	// ID is the id of the message the key added in the exporting store;
	// 0 when it does not say.
	ID int64
}
