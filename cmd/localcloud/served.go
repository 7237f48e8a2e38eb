package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/supervisor"
)

// loadServedStack is loadStack for the data commands (kv, queue, backup):
// when the stack file holds mistakes while a localcloud up serves it,
// they work on the last good stack up serves (from its runtime.json)
// after one warning line naming the first problem; up keeps serving that
// stack too. Without a running up the error stands. fileErr is the stack
// file's error when st is the served stack, nil otherwise.
func (a *app) loadServedStack(file string) (st *config.Stack, fileErr error, err error) {
	st, err = a.loadStack(file)
	var ce *config.Errors
	if err == nil || !errors.As(err, &ce) || len(ce.Problems) == 0 {
		return st, nil, err
	}
	path := a.stackPath(file)
	abs, aerr := filepath.Abs(path)
	dataDir, ok := fallbackDataDir(path)
	if aerr != nil || !ok {
		return nil, nil, err
	}
	rt, running, perr := supervisor.Probe(dataDir)
	if perr != nil || !running || rt == nil || filepath.Clean(rt.StackFile) != abs {
		return nil, nil, err
	}
	served := stackFromRuntime(rt)
	if !a.warnedServed {
		a.warnedServed = true
		more := ""
		if n := len(ce.Problems); n > 1 {
			more = fmt.Sprintf(" (and %s; localcloud validate lists them)", quantity(n-1, "more problem"))
		}
		fmt.Fprintf(a.stderr, "warning: %s%s; using the last good stack, which localcloud up (pid %d) serves\n",
			ce.Problems[0].String(), more, rt.PID)
	}
	return served, err, nil
}

// stackFromRuntime is the stack a running up serves, as its runtime file
// describes it: the bindings with every setting they are opened with.
func stackFromRuntime(rt *supervisor.Runtime) *config.Stack {
	st := &config.Stack{
		Name:    rt.Stack,
		File:    rt.StackFile,
		Dir:     filepath.Dir(rt.StackFile),
		DataDir: rt.DataDir,
	}
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, rb := range rt.Bindings {
		b := config.Binding{
			Name:              rb.Name,
			Type:              config.Type(rb.Type),
			Engine:            rb.Engine,
			Replicas:          rb.Replicas,
			Path:              rb.Path,
			Durability:        rb.Durability,
			VisibilityTimeout: ms(rb.VisibilityTimeoutMs),
			MaxAttempts:       rb.MaxAttempts,
			DeadLetter:        rb.DeadLetter,
			RetryDelay:        ms(rb.RetryDelayMs),
			MaxRetryDelay:     ms(rb.MaxRetryDelayMs),
			DedupWindow:       ms(rb.DedupWindowMs),
			Created:           rb.CreatedBySQS,
			SQS:               config.SQSAttrs{Name: rb.SQSName},
		}
		if b.Engine == "" {
			b.Engine = config.DefaultEngine
		}
		st.Bindings = append(st.Bindings, b)
	}
	return st
}
