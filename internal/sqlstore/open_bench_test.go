package sqlstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
)

// BenchmarkOpenStore is the open of one store as up's start does it, on a
// new directory (fresh: the store is created) and on a store created
// before (existing); the close after each open is not timed. Issue 25: up
// opens 20 at its start, and on a busy machine their CPU time is its wait:
// cpu-ns/op is the process's CPU time (user and system, every thread)
// during the opens, which a loaded machine stretches much less than ns/op.
func BenchmarkOpenStore(b *testing.B) {
	ctx := context.Background()
	open := map[string]func(dir string) (func() error, error){
		"kv": func(dir string) (func() error, error) {
			s, err := kv.Open(ctx, dir)
			if err != nil {
				return nil, err
			}
			return s.Close, nil
		},
		"queue": func(dir string) (func() error, error) {
			q, err := queue.Open(ctx, dir)
			if err != nil {
				return nil, err
			}
			return q.Close, nil
		},
	}
	for _, typ := range []string{"kv", "queue"} {
		for _, mode := range []string{"fresh", "existing"} {
			b.Run(typ+"/"+mode, func(b *testing.B) {
				root := b.TempDir()
				dir := filepath.Join(root, "existing")
				if mode == "existing" {
					closeFn, err := open[typ](dir)
					if err == nil {
						err = closeFn()
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				i := 0
				var cpu time.Duration
				for b.Loop() {
					d := dir
					if mode == "fresh" {
						i++
						d = filepath.Join(root, fmt.Sprint(i))
					}
					before := cpuTime(b)
					closeFn, err := open[typ](d)
					cpu += cpuTime(b) - before
					b.StopTimer()
					if err == nil {
						err = closeFn()
					}
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// cpuTime is the CPU time this process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
