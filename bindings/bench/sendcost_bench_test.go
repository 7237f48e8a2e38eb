//go:build unix

package bench

import (
	"context"
	"database/sql"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
)

// sendCostRounds is how many alternating rounds BenchmarkSendCosts runs.
const sendCostRounds = 5

// BenchmarkSendCosts: what bounds a single Send (issue 25). Each round
// sends b.N messages one at a time to the same store file five ways, one
// after the other (every round alternates them; each opens and closes its
// own connection, never two at once):
//
//   - engine: queue.Send through the public API.
//   - raw: the spec's INSERT, prepared once, one autocommit statement per
//     message, on one connection with the engine's writer pragmas
//     (bindings/bench floorStore): no lock file, no checkpointer.
//   - raw+lock: raw inside the engine's lock-file protocol (the in-process
//     mutex, then flock on the lock file) per message.
//   - raw+ckpt: raw with the engine's background checkpointer (a
//     goroutine with a connection of its own runs a passive checkpoint
//     every 64 commits, and finishes the copy holding the write lock once
//     the WAL holds 2000 pages).
//   - raw+lock+ckpt: both.
//
// Reports the median sends/s of each (engine-sends/s, raw-sends/s, ...),
// each median ratio to raw (x-vs-raw), and the median CPU time of the
// process per send (x-cpu-us: user+system from getrusage, every goroutine,
// the checkpointer's included), which other processes on the machine move
// far less than the rates. One op is one send of one way.
func BenchmarkSendCosts(b *testing.B) {
	type way struct {
		name       string
		lock, ckpt bool
	}
	ways := []way{{"raw", false, false}, {"raw+lock", true, false}, {"raw+ckpt", false, true}, {"raw+lock+ckpt", true, true}}
	dir := b.TempDir()
	prefillQueue(b, dir, 0)
	rates := map[string][]float64{}
	ratios := map[string][]float64{}
	cpu := map[string][]float64{}
	for r := range sendCostRounds {
		round := map[string]float64{}
		var us float64
		round["engine"], us = engineSends(b, dir, b.N)
		cpu["engine"] = append(cpu["engine"], us)
		for _, w := range ways {
			round[w.name], us = rawSends(b, dir, b.N, w.lock, w.ckpt)
			cpu[w.name] = append(cpu[w.name], us)
		}
		for k, v := range round {
			rates[k] = append(rates[k], v)
			ratios[k] = append(ratios[k], v/round["raw"])
		}
		b.Logf("round %d: engine %.0f, raw %.0f, raw+lock %.0f, raw+ckpt %.0f, raw+lock+ckpt %.0f sends/s",
			r+1, round["engine"], round["raw"], round["raw+lock"], round["raw+ckpt"], round["raw+lock+ckpt"])
	}
	for k, v := range rates {
		b.ReportMetric(median(v), k+"-sends/s")
		b.ReportMetric(median(cpu[k]), k+"-cpu-us")
		if k != "raw" {
			b.ReportMetric(median(ratios[k]), k+"-vs-raw")
		}
	}
}

// engineSends opens the queue in dir, sends n messages one at a time and
// closes it; it returns the sends per second and the CPU microseconds per
// send.
func engineSends(b *testing.B, dir string, n int) (rate, cpuUS float64) {
	b.StopTimer()
	q, err := queue.Open(context.Background(), dir)
	if err != nil {
		b.Fatal(err)
	}
	p := queue.Text(payload100)
	ctx := context.Background()
	c0 := cpuTime()
	b.StartTimer()
	start := time.Now()
	for range n {
		if err := q.Send(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	d := time.Since(start)
	b.StopTimer()
	us := float64((cpuTime() - c0).Microseconds()) / float64(n)
	if err := q.Close(); err != nil {
		b.Fatal(err)
	}
	return float64(n) / d.Seconds(), us
}

// rawSends is engineSends with the spec's prepared INSERT on a floorStore
// connection, with or without the lock-file protocol and the checkpointer.
func rawSends(b *testing.B, dir string, n int, lock, ckpt bool) (rate, cpuUS float64) {
	b.StopTimer()
	f, err := openFloor(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer f.close()
	ctx := context.Background()
	ins, err := f.conn.PrepareContext(ctx, specSend)
	if err != nil {
		b.Fatal(err)
	}
	defer ins.Close()
	var c *floorCheckpointer
	if ckpt {
		if c, err = startFloorCheckpointer(f, lock); err != nil {
			b.Fatal(err)
		}
	}
	typ := string(queue.TypeText)
	c0 := cpuTime()
	b.StartTimer()
	start := time.Now()
	for range n {
		if lock {
			f.lockMu <- struct{}{}
			if err := syscall.Flock(int(f.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				b.Fatal(err)
			}
		}
		_, err := ins.ExecContext(ctx, typ, payload100, time.Now().UnixMilli())
		if lock {
			_ = syscall.Flock(int(f.lock.Fd()), syscall.LOCK_UN)
			<-f.lockMu
		}
		if err != nil {
			b.Fatal(err)
		}
		c.committed()
	}
	d := time.Since(start)
	b.StopTimer()
	us := float64((cpuTime() - c0).Microseconds()) / float64(n)
	c.close()
	return float64(n) / d.Seconds(), us
}

// floorCheckpointer is the engine's background checkpointer
// (internal/sqlstore/checkpoint.go) for a floorStore: a passive checkpoint
// every 64 commits on a connection of its own, and the copy finished under
// the write lock once the WAL holds 2000 pages.
type floorCheckpointer struct {
	f       *floorStore
	lock    bool
	db      *sql.DB
	kick    chan struct{}
	done    chan struct{}
	commits int
}

func startFloorCheckpointer(f *floorStore, lock bool) (*floorCheckpointer, error) {
	db, err := sql.Open("sqlite", f.dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	c := &floorCheckpointer{f: f, lock: lock, db: db, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go c.run()
	return c, nil
}

// committed counts a commit; nil-safe (no checkpointer).
func (c *floorCheckpointer) committed() {
	if c == nil {
		return
	}
	if c.commits++; c.commits < 64 {
		return
	}
	c.commits = 0
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *floorCheckpointer) run() {
	defer close(c.done)
	for range c.kick {
		frames, err := c.checkpoint()
		if err != nil || frames < 2000 {
			continue
		}
		c.f.lockMu <- struct{}{}
		if c.lock {
			_ = syscall.Flock(int(c.f.lock.Fd()), syscall.LOCK_EX)
		}
		_, _ = c.checkpoint()
		if c.lock {
			_ = syscall.Flock(int(c.f.lock.Fd()), syscall.LOCK_UN)
		}
		<-c.f.lockMu
	}
}

func (c *floorCheckpointer) checkpoint() (frames int, err error) {
	var busy, copied int
	err = c.db.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied)
	return frames, err
}

// close stops the goroutine and closes its connection; nil-safe.
func (c *floorCheckpointer) close() {
	if c == nil {
		return
	}
	close(c.kick)
	<-c.done
	_ = c.db.Close()
}

// cpuTime is the process's user plus system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
