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

// Spawn returns the command of load process index: the caller's binary
// re-executed as a worker that opens a Store on the same store and calls
// Work with the same Config. Work says it is ready on its stdout and reads
// when the run starts and ends from its stdin, so that every process
// starts together however long they took to start (a loaded machine).
type Spawn func(index int) *exec.Cmd

// window is what RunProcesses writes to each load process once all are
// ready: when the run starts and ends, Unix nanoseconds.
type window struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

// RunProcesses starts cfg.Processes load processes with spawn, shows their
// progress, and merges what they report. Their stderr goes to stderr. When
// ctx ends they are killed (by pid) and waited for.
func RunProcesses(ctx context.Context, cfg Config, spawn Spawn, stderr io.Writer, progress *Progress) (Result, error) {
	type child struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		result Result
		err    error
		counts []atomic.Uint64
	}
	children := make([]*child, cfg.Processes)
	ready := make(chan struct{}, cfg.Processes)
	var wg sync.WaitGroup
	kill := func(cs []*child) {
		for _, ch := range cs {
			_ = ch.cmd.Process.Kill() // by pid; Wait runs in its goroutine
		}
	}
	for i := range children {
		cmd := spawn(i)
		cmd.Stderr = stderr
		stdout, err := cmd.StdoutPipe()
		var stdin io.WriteCloser
		if err == nil {
			stdin, err = cmd.StdinPipe()
		}
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			kill(children[:i])
			wg.Wait()
			return Result{}, fmt.Errorf("start load process: %w", err)
		}
		ch := &child{cmd: cmd, stdin: stdin, counts: make([]atomic.Uint64, len(Ops[cfg.Kind]))}
		children[i] = ch
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch.result, ch.err = readWorker(stdout, ch.counts, ready)
			if werr := cmd.Wait(); ch.err == nil && werr != nil {
				ch.err = fmt.Errorf("load process %d: %w", cmd.Process.Pid, werr)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	// Every process has opened the store: the run starts now, for all.
	for range children {
		select {
		case <-ready:
		case <-done:
			for _, ch := range children {
				if ch.err != nil {
					return Result{}, ch.err
				}
			}
			return Result{}, errors.New("a load process ended before it was ready")
		case <-ctx.Done():
			kill(children)
			<-done
			return Result{}, ctx.Err()
		}
	}
	start := time.Now().Add(StartDelay)
	end := start.Add(cfg.Duration)
	line, _ := json.Marshal(window{Start: start.UnixNano(), End: end.UnixNano()})
	for _, ch := range children {
		_, _ = ch.stdin.Write(append(line, '\n')) // a process that died reports through Wait
		_ = ch.stdin.Close()
	}
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
			kill(children)
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
	Ready    bool     `json:"ready,omitempty"`
	Progress []uint64 `json:"progress,omitempty"`
	Result   *Result  `json:"result,omitempty"`
}

func readWorker(r io.Reader, counts []atomic.Uint64, ready chan<- struct{}) (Result, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var l workerLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return Result{}, fmt.Errorf("load process printed %q: %w", sc.Text(), err)
		}
		if l.Ready {
			ready <- struct{}{} // buffered for every process
			continue
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

// Work is the body of load process index (see Spawn), on a store it has
// opened: it says it is ready on w, reads the run's start and end from r
// (a line RunProcesses writes once every process is ready), runs cfg's
// load on store from start until end, and prints its progress and then
// its result on w, one JSON line each.
func Work(ctx context.Context, cfg Config, store Store, index int, r io.Reader, w io.Writer) error {
	enc := json.NewEncoder(w)
	if err := enc.Encode(workerLine{Ready: true}); err != nil {
		return err
	}
	sc := bufio.NewScanner(r)
	if !sc.Scan() {
		return fmt.Errorf("no start from the bench that started this load process: %v", sc.Err())
	}
	var win window
	if err := json.Unmarshal(sc.Bytes(), &win); err != nil || win.End <= win.Start {
		return fmt.Errorf("the start line %q is not a window: %v", sc.Text(), err)
	}
	start, end := time.Unix(0, win.Start), time.Unix(0, win.End)
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
