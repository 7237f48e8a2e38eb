// Package localcloudtest runs a whole localcloud stack inside one Go test:
// what `localcloud up` serves, in process, with nothing to install or start.
//
//	func TestCheckout(t *testing.T) {
//		s := localcloudtest.Start(t, "../stack.yaml")
//		orders := s.Queue("orders")   // the same store the app opens with queue.FromEnv
//		runMyApp(t)                    // reads the LOCALCLOUD_* environment Start set
//		...
//	}
//
// Start reads the stack file as `up` does, but gives the test its own data
// dir (a t.TempDir, whatever dataDir the file names) and a free NATS port
// on 127.0.0.1 (whatever notify.listen says), runs up's supervisor on them
// (the stores, the embedded NATS server, the wake-up hints, runtime.json),
// and sets the app environment (LOCALCLOUD_STACK_NAME, LOCALCLOUD_NATS_URL,
// LOCALCLOUD_BINDING_<NAME>, as `localcloud env` prints it) with t.Setenv,
// so queue.FromEnv and kv.FromEnv in the code under test find the stores.
// t.Cleanup closes the bindings Stack opened, stops the supervisor (NATS
// included) and then removes the data dir: no process, port or file
// outlives the test.
//
// Because it uses t.Setenv, a test that calls Start cannot run in
// parallel with others (t.Parallel panics). A binding with an absolute
// path would escape the test's data dir, so such a stack is refused.
package localcloudtest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/supervisor"
)

// startTimeout bounds Start; the supervisor is ready in well under a second.
const startTimeout = 30 * time.Second

// Stack is a running stack of one test. Its methods fail the test (t.Fatal)
// instead of returning errors; call them from the test's goroutine.
type Stack struct {
	t     testing.TB
	st    *config.Stack
	sup   *supervisor.Supervisor
	env   map[string]string
	mu    sync.Mutex
	kvs   map[string]*kv.Store
	queue map[string]*queue.Queue
}

// Option changes what Start does.
type Option func(*options)

type options struct {
	logger *slog.Logger
}

// WithLogger sends the supervisor's log lines (the ones `up` prints on
// stderr) to l. By default they are discarded.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// Start runs the stack of stackFile for the test t (see the package
// documentation) and returns it once it serves. Any problem (a stack file
// with mistakes, a store that cannot be created) fails the test at once.
func Start(t testing.TB, stackFile string, opts ...Option) *Stack {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	dataDir := t.TempDir()
	st, err := config.Load(stackFile, config.WithDataDir(dataDir))
	if err != nil {
		t.Fatalf("localcloudtest: %v", err) // it names the file
	}
	for _, b := range st.Bindings {
		if b.AbsolutePathGiven {
			t.Fatalf("localcloudtest: binding %s of %s has the absolute path %s, outside the test's data dir; "+
				"give it a path relative to dataDir (or none)", b.Name, stackFile, b.Path)
		}
	}
	// A free port on loopback: tests never take a fixed port.
	st.Notify.Listen = "127.0.0.1:0"

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	sup, err := supervisor.Start(ctx, st, supervisor.Options{Logger: o.logger, NoWatch: true})
	if err != nil {
		t.Fatalf("localcloudtest: start stack %s: %v", st.Name, err)
	}
	// Registered after TempDir's, so it runs before the data dir goes.
	t.Cleanup(func() {
		if err := sup.Close(); err != nil {
			t.Errorf("localcloudtest: stop stack %s: %v", st.Name, err)
		}
	})

	vars, err := supervisor.AppEnv(st, sup.URL())
	if err != nil {
		t.Fatalf("localcloudtest: app environment of %s: %v", st.Name, err)
	}
	s := &Stack{t: t, st: st, sup: sup, env: make(map[string]string, len(vars)),
		kvs: map[string]*kv.Store{}, queue: map[string]*queue.Queue{}}
	for _, v := range vars {
		t.Setenv(v.Name, v.Value)
		s.env[v.Name] = v.Value
	}
	return s
}

// Env returns a copy of the app environment Start set: the variables
// `localcloud env` prints for this stack.
func (s *Stack) Env() map[string]string {
	m := make(map[string]string, len(s.env))
	for k, v := range s.env {
		m[k] = v
	}
	return m
}

// Environ returns Env as NAME=VALUE pairs, for exec.Cmd.Env of a child
// process (append them to os.Environ()).
func (s *Stack) Environ() []string {
	out := make([]string, 0, len(s.env))
	for k, v := range s.env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// NATSURL is the URL of the stack's embedded NATS server.
func (s *Stack) NATSURL() string { return s.sup.URL() }

// DataDir is the test's data dir holding every store.
func (s *Stack) DataDir() string { return s.st.DataDir }

// Config is the stack as loaded, with the test's data dir and NATS address.
func (s *Stack) Config() *config.Stack { return s.st }

// KV returns the KV store of the binding name, opened with kv.FromEnv as an
// app would and closed by t.Cleanup. Every call for one name returns the
// same handle.
func (s *Stack) KV(name string) *kv.Store {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.kvs[name]; ok {
		return h
	}
	s.binding(name, config.TypeKV)
	h, err := kv.FromEnv(context.Background(), name)
	if err != nil {
		s.t.Fatalf("localcloudtest: open kv binding %s: %v", name, err)
	}
	s.t.Cleanup(func() {
		if err := h.Close(); err != nil {
			s.t.Errorf("localcloudtest: close kv binding %s: %v", name, err)
		}
	})
	s.kvs[name] = h
	return h
}

// Queue returns the queue of the binding name, opened with queue.FromEnv as
// an app would (hints on, dead-letter policy applied) and closed by
// t.Cleanup. Every call for one name returns the same handle.
func (s *Stack) Queue(name string) *queue.Queue {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.queue[name]; ok {
		return h
	}
	s.binding(name, config.TypeQueue)
	h, err := queue.FromEnv(context.Background(), name)
	if err != nil {
		s.t.Fatalf("localcloudtest: open queue binding %s: %v", name, err)
	}
	s.t.Cleanup(func() {
		if err := h.Close(); err != nil {
			s.t.Errorf("localcloudtest: close queue binding %s: %v", name, err)
		}
	})
	s.queue[name] = h
	return h
}

// binding fails the test unless the stack has a binding name of type typ.
func (s *Stack) binding(name string, typ config.Type) {
	s.t.Helper()
	b, ok := s.st.Binding(name)
	if !ok {
		var names []string
		for _, b := range s.st.Bindings {
			names = append(names, b.Name)
		}
		s.t.Fatalf("localcloudtest: stack %s has no binding %q (it has %v)", s.st.Name, name, names)
	}
	if b.Type != typ {
		s.t.Fatalf("localcloudtest: binding %s is a %s binding, not %s", name, b.Type, typ)
	}
}

// String describes the stack for log lines.
func (s *Stack) String() string {
	return fmt.Sprintf("stack %s (data dir %s, NATS %s)", s.st.Name, s.st.DataDir, s.sup.URL())
}
