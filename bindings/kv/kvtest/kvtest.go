// Package kvtest is the conformance suite of the KV binding: the semantics
// every engine behind package kv must have, tested through the public API
// only (package kv). The SQLite engine's file and memory modes run it (see
// kv_test.go); so does any other engine, in this module or another one:
//
//	func TestMyEngine(t *testing.T) {
//		kvtest.Run(t, func(t *testing.T) kvtest.Harness {
//			loc := newBucket(t) // a fresh, empty store of the engine
//			return kvtest.Harness{
//				Open: func(t *testing.T, opts ...kv.Option) *kv.Store {
//					s, err := kv.OpenEngine(context.Background(), myengine.Engine{}, loc, opts...)
//					if err != nil {
//						t.Fatal(err)
//					}
//					return s
//				},
//				Persistent: true,
//				Caps:       kvtest.Capabilities{}, // runs on server time
//			}
//		})
//	}
//
// The cases are split by area: limits.go (keys, values, scan input),
// basic.go (put, get, delete, put-if-absent), ttl.go (expiry), scans.go
// (pages and cursors) and multihandle.go (persistence, racing handles). A
// semantic change goes here, not into one engine's tests; what only one
// engine stores (the SQLite engine's expires_at column, its rows of expired
// keys) is tested beside that engine.
package kvtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/internal/clock"
)

// Harness gives the suite one fresh store.
type Harness struct {
	// Open opens a new handle on the harness's store; every call names the
	// same store. The suite closes the handles it opens.
	Open func(t *testing.T, opts ...kv.Option) *kv.Store
	// Persistent is true when data survives closing every handle (files).
	Persistent bool
	// Caps is what the engine lets the suite do.
	Caps Capabilities
	// Check, if set, runs after every case on a fresh handle: an engine's
	// own consistency check (the SQLite engine's integrity_check).
	Check func(t *testing.T, s *kv.Store)
}

// Capabilities is the small set of facts about an engine the suite needs.
type Capabilities struct {
	// ControlsTime says the engine takes every time it uses from
	// kv.WithClock, so the suite moves a fake clock and checks expiry to
	// the millisecond. Without it the engine runs on its own (server) time:
	// the suite uses short real durations and sleeps, and checks each
	// expiry boundary with a margin of TimeSlack on either side.
	ControlsTime bool
	// TimeSlack is that margin; 0 means 250 ms.
	TimeSlack time.Duration
}

// Run runs every case, each on a store from newHarness.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	cases := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"Basic/PutGetExistsDelete", testBasic},
		{"Limits/Key", testKeyLimits},
		{"Limits/Value", testValueLimits},
		{"Limits/ScanInput", testScanInput},
		{"PutIfNotExists/FirstWins", testPutIfNotExists},
		{"TTL/ExpiresInMillis", testTTL},
		{"TTL/ZeroIsExpired", testTTLZero},
		{"TTL/ExpiredTakeover", testExpiredTakeover},
		{"TTL/ScanFiltersButKeeps", testScanFiltersExpired},
		{"Persistence/Reopen", testPersistence},
		{"Scan/Pages", testScanPages},
		{"Scan/DeleteBetweenPages", testScanDeleteBetweenPages},
		{"Scan/CursorBoundToPrefix", testCursorBinding},
		{"Scan/ExpiringMidScan", testScanExpiringMidScan},
		{"Scan/LimitZeroAndMax", testScanLimits},
		{"Scan/EveryKeyWithoutPrefix", testScanEveryKey},
		{"TTL/ExpiresAtShown", testExpiresAtShown},
		{"Concurrency/SixteenRacers", testRacers},
		{"Concurrency/TTLRace", testTTLRace},
		{"Concurrency/InterleavedHandles", testInterleaved},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h = withCleanup(t, h)
			c.fn(t, h)
		})
	}
}

// withCleanup closes every handle the case opens and runs the harness's
// check afterwards.
func withCleanup(t *testing.T, h Harness) Harness {
	open := h.Open
	h.Open = func(t *testing.T, opts ...kv.Option) *kv.Store {
		t.Helper()
		s := open(t, opts...)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	if h.Check != nil {
		t.Cleanup(func() {
			s := open(t)
			defer s.Close()
			h.Check(t, s)
		})
	}
	return h
}

var ctx = context.Background()

// timeline is the time a case runs on: a fake clock the suite moves, or the
// engine's own time, which the suite waits for.
type timeline struct {
	fake  *clock.Fake // nil on server time
	slack time.Duration
}

func newTimeline(h Harness) *timeline {
	tl := &timeline{slack: h.Caps.TimeSlack}
	if tl.slack == 0 {
		tl.slack = 250 * time.Millisecond
	}
	if h.Caps.ControlsTime {
		tl.fake = clock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	}
	return tl
}

// opts are the Open options that put a handle on the timeline.
func (tl *timeline) opts() []kv.Option {
	if tl.fake == nil {
		return nil
	}
	return []kv.Option{kv.WithClock(tl.fake.Now)}
}

// justBefore moves from the moment of a put to just before ttl ran out:
// 1 ms before on a fake clock, TimeSlack before on server time.
func (tl *timeline) justBefore(ttl time.Duration) {
	if tl.fake != nil {
		tl.fake.Advance(ttl - time.Millisecond)
		return
	}
	time.Sleep(ttl - tl.slack)
}

// justAfter follows justBefore: to the exact expiry on a fake clock (an
// expires_at <= now is expired), TimeSlack past it on server time.
func (tl *timeline) justAfter() {
	if tl.fake != nil {
		tl.fake.Advance(time.Millisecond)
		return
	}
	time.Sleep(2 * tl.slack)
}

// past moves d ahead (and TimeSlack more on server time).
func (tl *timeline) past(d time.Duration) {
	if tl.fake != nil {
		tl.fake.Advance(d)
		return
	}
	time.Sleep(d + tl.slack)
}

// aeon moves a very long way ahead on a fake clock, TimeSlack on server
// time.
func (tl *timeline) aeon() {
	if tl.fake != nil {
		tl.fake.Advance(1000 * time.Hour)
		return
	}
	time.Sleep(tl.slack)
}

func mustPut(t *testing.T, s *kv.Store, key, value string, opts ...kv.PutOption) bool {
	t.Helper()
	ok, err := s.Put(ctx, key, []byte(value), opts...)
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return ok
}

func wantValue(t *testing.T, s *kv.Store, key, want string) {
	t.Helper()
	got, ok, err := s.Get(ctx, key)
	if err != nil || !ok || string(got) != want {
		t.Fatalf("Get(%q) = %q, %v, %v; want %q, true, nil", key, got, ok, err, want)
	}
}

func wantAbsent(t *testing.T, s *kv.Store, key string) {
	t.Helper()
	got, ok, err := s.Get(ctx, key)
	if err != nil || ok || got != nil {
		t.Fatalf("Get(%q) = %q, %v, %v; want absent", key, got, ok, err)
	}
	ex, err := s.Exists(ctx, key)
	if err != nil || ex {
		t.Fatalf("Exists(%q) = %v, %v; want false", key, ex, err)
	}
}

func wantInvalid(t *testing.T, err error, mentions ...string) {
	t.Helper()
	if !errors.Is(err, bindings.ErrInvalidInput) {
		t.Fatalf("err = %v; want INVALID_INPUT", err)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
}

// keyChars are the bytes a key may hold.
const keyChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_:."

// countAll counts the live keys of the store through Scan: every key starts
// with one of keyChars.
func countAll(t *testing.T, s *kv.Store) int {
	t.Helper()
	n := 0
	for i := 0; i < len(keyChars); i++ {
		cursor := ""
		for {
			p, err := s.Scan(ctx, keyChars[i:i+1], kv.MaxScanLimit, cursor)
			if err != nil {
				t.Fatal(err)
			}
			n += len(p.Items)
			if p.NextCursor == "" {
				break
			}
			cursor = p.NextCursor
		}
	}
	return n
}

func keysOf(p kv.Page) string {
	var ks []string
	for _, it := range p.Items {
		ks = append(ks, it.Key)
	}
	return strings.Join(ks, ",")
}
