// Package explorer is the web explorer that localcloud up serves: pages to
// look at and operate every binding of the stack while up runs, a JSON API
// under /api/ that the pages (and scripts) use, and a live feed of what up
// observes as Server-Sent Events.
//
// It works through the public API of bindings/kv and bindings/queue only
// (Peek, Stats, Send, Purge, Redrive, Scan, Lookup, Put, Delete) on the
// handles up holds, so it never claims a message to show it, and works for
// whatever engine serves a binding.
//
// Security, as for anything that listens: loopback only (the stack file
// refuses anything else); a request whose Host is not the listen address or
// localhost is refused (DNS rebinding); every change is a POST carrying the
// per-process CSRF token from a same-origin page; with ReadOnly every change
// is refused; when the stack sets notify.token the explorer asks for it once
// and then keeps an HttpOnly, SameSite=Strict cookie. Pages are
// html/template, so message bodies and values are escaped.
package explorer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/supervisor"
)

// Defaults of Options.
const (
	// DefaultPollInterval is how often the counts of every binding are read
	// while a live feed is open. Defaults to 250 milliseconds.
	DefaultPollInterval = 250 * time.Millisecond
	// DefaultPageSize is the number of messages or keys on one page.
	DefaultPageSize = 50
)

// Source is what up serves: *supervisor.Supervisor implements it.
type Source interface {
	// Runtime returns the served stack as runtime.json describes it.
	Runtime() supervisor.Runtime
	// KV returns the handle of a KV binding, opened on demand, and its
	// release, which the caller calls once done with it (the store may be
	// closed after); an error matching supervisor.ErrNotServed for a
	// name that is no KV binding served.
	KV(ctx context.Context, name string) (k *kv.Store, release func(), err error)
	// Queue returns the open handle of a queue binding.
	Queue(name string) (*queue.Queue, bool)
	// Describe names the engine and format of a binding's store ("file
	// (localqueue.v1)", "jetstream R3"); "" when it is not open.
	Describe(name string) string
}

// EnvVar is one variable of the app environment, for the env page.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// Secret marks a value that is shown masked.
	Secret bool `json:"secret,omitempty"`
}

// Options configures New.
type Options struct {
	// Source gives the bindings and their handles. Required.
	Source Source
	// Conn is a connection to the stack's NATS server; the explorer
	// subscribes to the hint subjects on it for the live feed and publishes
	// a hint after a send or redrive. nil: no hints in the feed.
	Conn *nats.Conn
	// ReadOnly refuses every change.
	ReadOnly bool
	// Token is the stack's notify.token; when set, the explorer asks for it
	// once per browser.
	Token string
	// AsyncAPI returns the stack's AsyncAPI document (JSON); nil hides it.
	AsyncAPI func() ([]byte, error)
	// Env returns the app environment; nil hides it.
	Env func() ([]EnvVar, error)
	// Logger receives the explorer's log lines. Defaults to discarding them.
	Logger *slog.Logger
	// PollInterval is how often the live feed reads the counts. Defaults to
	// DefaultPollInterval.
	PollInterval time.Duration
	// Now is the clock of the pages (ages, states). Defaults to time.Now.
	Now func() time.Time
}

// Server is the explorer of one up. Create it with New, serve it with
// Serve, stop it with Close.
type Server struct {
	opts   Options
	log    *slog.Logger
	hosts  map[string]bool // allowed Host headers, lower case
	csrf   string
	sessID string // the cookie value that proves the token was given
	mux    *http.ServeMux
	feed   *feed

	mu      sync.Mutex
	srv     *http.Server
	closeMu sync.Once
}

// New builds the explorer for the listen address addr (host:port as bound,
// e.g. the listener's address): only requests with that Host, or
// localhost/127.0.0.1 on its port, are served.
func New(addr string, opts Options) (*Server, error) {
	if opts.Source == nil {
		return nil, errors.New("explorer: no source")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("explorer: listen address %q: %w", addr, err)
	}
	s := &Server{
		opts:   opts,
		log:    opts.Logger,
		csrf:   randomHex(32),
		sessID: randomHex(32),
		hosts: map[string]bool{
			strings.ToLower(addr): true,
			"localhost:" + port:   true,
			"127.0.0.1:" + port:   true,
			"[::1]:" + port:       true,
		},
	}
	s.feed = newFeed(s)
	s.routes()
	return s, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// Handler returns the explorer's handler with every security rule applied.
func (s *Server) Handler() http.Handler { return s.guard(s.mux) }

// Serve serves the explorer on ln until Close, in the background; the feed
// starts with it.
func (s *Server) Serve(ln net.Listener) {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	s.feed.start()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("explorer stopped serving", "err", err)
		}
	}()
}

// Close stops the feed and the server: open event streams end, requests
// in progress get until ctx ends. Safe to call more than once.
func (s *Server) Close(ctx context.Context) error {
	var err error
	s.closeMu.Do(func() {
		s.feed.stop()
		s.mu.Lock()
		srv := s.srv
		s.mu.Unlock()
		if srv != nil {
			err = srv.Shutdown(ctx)
			if err != nil {
				_ = srv.Close()
			}
		}
	})
	return err
}

// URL returns the address to open in a browser for a listener's address.
func URL(addr net.Addr) string { return "http://" + addr.String() + "/" }
