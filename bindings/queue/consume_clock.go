package queue

import "time"

// clock is the time source of Consume's parts: the inline runner measures
// its handlers and arms the hand-off timer with it, each lease keeper arms
// its extension timer with it. Consume uses the wall clock (wallClock);
// the parts' own tests drive a fake one, so no test of theirs depends on
// how fast the machine runs.
type clock interface {
	Now() time.Time
	// AfterFunc runs f on a goroutine of its own once d has passed; the
	// timer is stopped and re-armed with Stop and Reset like a *time.Timer
	// made by time.AfterFunc.
	AfterFunc(d time.Duration, f func()) timer
}

// timer is the part of *time.Timer the parts use.
type timer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

// wallClock is the clock of a running Consume.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) AfterFunc(d time.Duration, f func()) timer { return time.AfterFunc(d, f) }
