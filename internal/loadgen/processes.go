package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"
)

// Spawn returns the command of load process index of a run that starts at
// start and ends at end: the caller's binary re-executed as a worker that
// calls Work with the same Config and a Store on the same store.
type Spawn func(index int, start, end time.Time) *exec.Cmd

// RunProcesses starts cfg.Processes load processes with spawn, shows their
// progress, and merges what they report. Their stderr goes to stderr. When
// ctx ends they are killed (by pid) and waited for.
func RunProcesses(ctx context.Context, cfg Config, spawn Spawn, stderr io.Writer, progress *Progress) (Result, error) {
	start := time.Now().Add(StartDelay)
	end := start.Add(cfg.Duration)
	type child struct {
		cmd    *exec.Cmd
		result Result
		err    error
		counts []atomic.Uint64
	}
	children := make([]*child, cfg.Processes)
	var wg sync.WaitGroup
	for i := range children {
		cmd := spawn(i, start, end)
		cmd.Stderr = stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return Result{}, err
		}
		if err := cmd.Start(); err != nil {
			for _, ch := range children[:i] {
				_ = ch.cmd.Process.Kill()
				_ = ch.cmd.Wait()
			}
			return Result{}, fmt.Errorf("start load process: %w", err)
		}
		ch := &child{cmd: cmd, counts: make([]atomic.Uint64, len(Ops[cfg.Kind]))}
		children[i] = ch
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch.result, ch.err = readWorker(stdout, ch.counts)
			if werr := cmd.Wait(); ch.err == nil && werr != nil {
				ch.err = fmt.Errorf("load process %d: %w", cmd.Process.Pid, werr)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(Tick)
	defer tick.Stop()
	for {
		select {
		case <-done:
			var merged Result
			for _, ch := range children {
				if ch.err != nil {
					return Result{}, ch.err
				}
				merged.Merge(ch.result)
			}
			return merged, nil
		case <-ctx.Done():
			for _, ch := range children {
				_ = ch.cmd.Process.Kill() // by pid; Wait runs in its goroutine
			}
			<-done
			return Result{}, ctx.Err()
		case <-tick.C:
			if progress != nil {
				counts := make([]uint64, len(Ops[cfg.Kind]))
				for _, ch := range children {
					for i := range counts {
						counts[i] += ch.counts[i].Load()
					}
				}
				progress.Show(time.Since(start), counts)
			}
		}
	}
}

// workerLine is one line a load process prints on stdout: progress counts
// while it runs, then its result.
type workerLine struct {
	Progress []uint64 `json:"progress,omitempty"`
	Result   *Result  `json:"result,omitempty"`
}

func readWorker(r io.Reader, counts []atomic.Uint64) (Result, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var l workerLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return Result{}, fmt.Errorf("load process printed %q: %w", sc.Text(), err)
		}
		for i, n := range l.Progress {
			if i < len(counts) {
				counts[i].Store(n)
			}
		}
		if l.Result != nil {
			_, _ = io.Copy(io.Discard, r)
			return *l.Result, nil
		}
	}
	if err := sc.Err(); err != nil {
		return Result{}, err
	}
	return Result{}, errors.New("load process ended without a result")
}

// Work is the body of load process index (see Spawn): it runs cfg's load
// on store from start until end, printing its progress and then its result
// on w, one JSON line each.
func Work(ctx context.Context, cfg Config, store Store, index int, start, end time.Time, w io.Writer) error {
	enc := json.NewEncoder(w)
	var mu sync.Mutex
	report := func(counts []uint64) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(workerLine{Progress: counts})
	}
	res, err := Run(ctx, cfg, store, index, start, end, report)
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return enc.Encode(workerLine{Result: &res})
}
