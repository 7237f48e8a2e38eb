// Package clock is a settable clock for tests of expiry, leases and order.
package clock

import (
	"sync"
	"time"
)

// Fake is a clock that moves only when told. The zero value starts at the
// Unix epoch; use New for a realistic start.
type Fake struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a Fake clock set to t.
func New(t time.Time) *Fake { return &Fake{t: t} }

// Now returns the clock's time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d (which may be negative).
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set moves the clock to t.
func (c *Fake) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}
