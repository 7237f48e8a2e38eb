package jsengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings"
	kvdriver "github.com/localcloud/localcloud/bindings/kv/driver"
	qdriver "github.com/localcloud/localcloud/bindings/queue/driver"
)

// The "service" values of a jetstream binding's JSON in the app
// environment (`localcloud env`, `localcloud run`). kv.FromEnv and
// queue.FromEnv open such bindings with EnvKVEngine and EnvQueueEngine.
const (
	ServiceKV    = "jetstream-kv"
	ServiceQueue = "jetstream-queue"
)

// EnvTLS are the TLS files of a connection, absolute paths; each "" when
// not set.
type EnvTLS struct {
	CA   string `json:"ca,omitempty"`
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
}

// Conn says how to reach a JetStream server or cluster. It holds no
// secret: the token is read from the variable TokenEnv names when the
// connection is made.
type Conn struct {
	// Servers are the nats:// or tls:// URLs to connect to.
	Servers []string `json:"servers"`
	// TokenEnv names the environment variable that holds the token; ""
	// for none.
	TokenEnv string `json:"tokenEnv,omitempty"`
	// Creds is a NATS credentials file; "" for none.
	Creds string `json:"creds,omitempty"`
	// TLS are the TLS files; nil for none.
	TLS *EnvTLS `json:"tls,omitempty"`
}

// EnvBinding is the part of a jetstream binding's JSON that the engine
// reads (a queue's JSON carries the queue settings of a local-queue
// binding beside it, read by package queue):
//
//	{"service":"jetstream-kv","name":"carts","servers":["nats://127.0.0.1:4222"],
//	 "replicas":1,"tokenEnv":"NATS_TOKEN","durability":"normal"}
type EnvBinding struct {
	Service string `json:"service"`
	// Name is the bucket's or queue's name: the stream LCKV_<name> or
	// LCQ_<name>.
	Name string `json:"name"`
	Conn
	// Replicas is the stream's replica count, 1..5.
	Replicas   int    `json:"replicas,omitempty"`
	Durability string `json:"durability,omitempty"`
}

// ParseEnvBinding decodes and checks a jetstream binding's JSON. Every
// problem is BINDING_SETUP_FAILED naming the field.
func ParseEnvBinding(raw []byte, service string) (EnvBinding, error) {
	var b EnvBinding
	if err := json.Unmarshal(raw, &b); err != nil {
		return b, bindings.Wrap(bindings.CodeBindingSetupFailed, err, "decode %s binding JSON", service)
	}
	switch {
	case b.Service != service:
		return b, bindings.Errorf(bindings.CodeBindingSetupFailed, "service is %q, want %q", b.Service, service)
	case !nameRE.MatchString(b.Name):
		return b, bindings.Errorf(bindings.CodeBindingSetupFailed, "name: must be 1..64 of A-Z a-z 0-9 _ -, got %q", b.Name)
	case len(b.Servers) == 0:
		return b, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"servers: must list at least one nats:// or tls:// URL, got none (is localcloud up running? with notify.listen on port 0 only a running up knows its URL)")
	case b.Replicas < 0 || b.Replicas > 5:
		return b, bindings.Errorf(bindings.CodeBindingSetupFailed, "replicas: must be between 1 and 5, got %d", b.Replicas)
	}
	for i, s := range b.Servers {
		if !strings.HasPrefix(s, "nats://") && !strings.HasPrefix(s, "tls://") {
			return b, bindings.Errorf(bindings.CodeBindingSetupFailed, "servers[%d]: must be a nats:// or tls:// URL, got %q", i, s)
		}
	}
	return b, nil
}

// connectWait bounds how long Dial retries while no server of the list
// answers yet (a cluster that is starting), and how long the engines'
// first JetStream calls are retried while a cluster elects its leaders.
const connectWait = 10 * time.Second

// Dial connects to c's servers with nats.go: the token from the variable
// c.TokenEnv names (looked up with lookup; nil means os.LookupEnv), the
// creds file, the TLS files. It retries for up to 10 s while no server
// answers. A token variable that is not set is BINDING_SETUP_FAILED naming
// it. name is the connection's name, for the server's monitoring.
func Dial(ctx context.Context, c Conn, name string, lookup func(string) (string, bool)) (*nats.Conn, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}
	if c.TokenEnv != "" {
		tok, ok := lookup(c.TokenEnv)
		if !ok || tok == "" {
			return nil, bindings.Errorf(bindings.CodeBindingSetupFailed,
				"tokenEnv: environment variable %s, which holds the JetStream token, is not set", c.TokenEnv)
		}
		opts = append(opts, nats.Token(tok))
	}
	if c.Creds != "" {
		if _, err := os.Stat(c.Creds); err != nil {
			return nil, bindings.Wrap(bindings.CodeBindingSetupFailed, err, "creds: read credentials file %s", c.Creds)
		}
		opts = append(opts, nats.UserCredentials(c.Creds))
	}
	if c.TLS != nil {
		if c.TLS.CA != "" {
			opts = append(opts, nats.RootCAs(c.TLS.CA))
		}
		if c.TLS.Cert != "" || c.TLS.Key != "" {
			opts = append(opts, nats.ClientCert(c.TLS.Cert, c.TLS.Key))
		}
	}
	urls := strings.Join(c.Servers, ",")
	deadline := time.Now().Add(connectWait)
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		nc, err := nats.Connect(urls, opts...)
		if err == nil {
			return nc, nil
		}
		// Only "nobody answers" is worth waiting for; a refused token or
		// a bad TLS file stays refused.
		if !errors.Is(err, nats.ErrNoServers) || time.Now().After(deadline) {
			return nil, bindings.Wrap(bindings.CodeBindingSetupFailed, err, "connect to JetStream at %s", urls)
		}
		select {
		case <-ctx.Done():
			return nil, bindings.Wrap(bindings.CodeBindingSetupFailed, ctx.Err(), "connect to JetStream at %s", urls)
		case <-time.After(wait):
		}
	}
}

// pool shares one connection per distinct server list and credentials in
// a process, counted by the stores that use it.
var pool struct {
	mu    sync.Mutex
	conns map[string]*shared
}

type shared struct {
	nc   *nats.Conn
	refs int
}

func (c Conn) key() string {
	t := EnvTLS{}
	if c.TLS != nil {
		t = *c.TLS
	}
	return strings.Join([]string{strings.Join(c.Servers, ","), c.TokenEnv, c.Creds, t.CA, t.Cert, t.Key}, "\x00")
}

// acquire returns the process's connection for c, dialling it on first
// use; release gives it back and closes it after the last store.
func acquire(ctx context.Context, c Conn) (nc *nats.Conn, release func(), err error) {
	k := c.key()
	pool.mu.Lock()
	defer pool.mu.Unlock()
	sh := pool.conns[k]
	if sh == nil || sh.nc.IsClosed() {
		nc, err := Dial(ctx, c, "localcloud-app", nil)
		if err != nil {
			return nil, nil, err
		}
		sh = &shared{nc: nc}
		if pool.conns == nil {
			pool.conns = map[string]*shared{}
		}
		pool.conns[k] = sh
	}
	sh.refs++
	var once sync.Once
	return sh.nc, func() {
		once.Do(func() {
			pool.mu.Lock()
			defer pool.mu.Unlock()
			sh.refs--
			if sh.refs > 0 {
				return
			}
			if pool.conns[k] == sh {
				delete(pool.conns, k)
			}
			_ = sh.nc.FlushTimeout(time.Second)
			sh.nc.Close()
		})
	}, nil
}

// SharedConns returns how many shared connections the process holds, for
// tests.
func SharedConns() int {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	return len(pool.conns)
}

// retryOpen runs open until it succeeds, returns a BINDING_SETUP_FAILED
// error (a contradicting stream: fail closed at once) or connectWait has
// passed: a cluster that just started answers the first JetStream calls
// with "temporarily unavailable" or "no suitable peers" while it elects.
func retryOpen[T any](ctx context.Context, open func() (T, error)) (T, error) {
	deadline := time.Now().Add(connectWait)
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		v, err := open()
		if err == nil || errors.Is(err, bindings.ErrBindingSetupFailed) || time.Now().After(deadline) || ctx.Err() != nil {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(wait):
		}
	}
}

// EnvKVEngine opens a jetstream-kv binding from its JSON (driver.Config.Binding)
// on the process's shared connection to its servers. kv.FromEnv uses it.
type EnvKVEngine struct{}

// Open opens the bucket cfg.Binding describes.
func (EnvKVEngine) Open(ctx context.Context, cfg kvdriver.Config) (kvdriver.Store, error) {
	st, release, err := openShared(ctx, cfg.Binding, ServiceKV, func(nc *nats.Conn, b EnvBinding) (kvdriver.Store, error) {
		cfg.Location = b.Name
		if cfg.NoCreate {
			if err := needStream(ctx, nc, "KV store", "LCKV_"+b.Name); err != nil {
				return nil, err
			}
		}
		return KVEngine{Conn: nc, Replicas: b.Replicas}.Open(ctx, cfg)
	})
	if err != nil {
		return nil, err
	}
	return &releasingStore{Store: st, release: release}, nil
}

// openShared reads a binding's JSON for service, takes the process's shared
// connection to its servers and opens the binding on it with open (retried
// while a cluster elects); release gives the connection back.
func openShared[T any](ctx context.Context, raw []byte, service string, open func(*nats.Conn, EnvBinding) (T, error)) (v T, release func(), err error) {
	b, err := ParseEnvBinding(raw, service)
	if err != nil {
		return v, nil, err
	}
	nc, release, err := acquire(ctx, b.Conn)
	if err != nil {
		return v, nil, err
	}
	if v, err = retryOpen(ctx, func() (T, error) { return open(nc, b) }); err != nil {
		release()
		return v, nil, err
	}
	return v, release, nil
}

// releasingStore gives the shared connection back when it closes.
type releasingStore struct {
	kvdriver.Store
	release func()
}

func (s *releasingStore) Close() error {
	err := s.Store.Close()
	s.release()
	return err
}

// EnvQueueEngine opens a jetstream-queue binding from its JSON
// (driver.Config.Binding) on the process's shared connection to its
// servers. queue.FromEnv uses it; the queue settings of the JSON
// (visibility, retry, dedup, dead letter) reach it as Open options.
type EnvQueueEngine struct{}

// Open opens the queue cfg.Binding describes.
func (EnvQueueEngine) Open(ctx context.Context, cfg qdriver.Config) (qdriver.Queue, error) {
	dlq, err := envDeadLetter(cfg)
	if err != nil {
		return nil, err
	}
	cfg.DeadLetter.Location = dlq
	q, release, err := openShared(ctx, cfg.Binding, ServiceQueue, func(nc *nats.Conn, b EnvBinding) (qdriver.Queue, error) {
		cfg.Location = b.Name
		if cfg.NoCreate {
			if err := needStream(ctx, nc, "queue", "LCQ_"+b.Name); err != nil {
				return nil, err
			}
			if err := needStream(ctx, nc, "dead-letter queue", "LCQ_"+dlq); dlq != "" && err != nil {
				return nil, err
			}
		}
		return QueueEngine{Conn: nc, Replicas: b.Replicas}.Open(ctx, cfg)
	})
	if err != nil {
		return nil, err
	}
	// The queue closes its Done channel on Close: the connection goes
	// back then, without wrapping the queue (a wrapper would hide the
	// optional interfaces the engine implements).
	go func() {
		<-q.Done()
		release()
	}()
	return q, nil
}

// envDeadLetter is the dead-letter queue of cfg's policy: its own, or, when
// it has maxAttempts only (FromEnv), deadLetter.name of the binding's JSON.
func envDeadLetter(cfg qdriver.Config) (string, error) {
	if cfg.DeadLetter.MaxAttempts <= 0 || cfg.DeadLetter.Location != "" {
		return cfg.DeadLetter.Location, nil
	}
	var b struct {
		DeadLetter *struct {
			Name string `json:"name"`
		} `json:"deadLetter"`
	}
	if err := json.Unmarshal(cfg.Binding, &b); err != nil {
		return "", bindings.Wrap(bindings.CodeBindingSetupFailed, err, "decode %s binding JSON", ServiceQueue)
	}
	if b.DeadLetter == nil || b.DeadLetter.Name == "" {
		return "", bindings.Errorf(bindings.CodeBindingSetupFailed,
			"maxAttempts needs deadLetter.name: a message past maxAttempts must have somewhere to go")
	}
	return b.DeadLetter.Name, nil
}

// needStream fails, wrapping bindings.ErrNoStore, when the stream name of
// a what ("queue") does not exist: a FromEnv open (driver
// Config.NoCreate) creates none. Stream names are case-sensitive, so
// "LCQ_Orders" is not "LCQ_orders".
func needStream(ctx context.Context, nc *nats.Conn, what, name string) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	_, err = js.Stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return &bindings.Error{Code: bindings.CodeBindingSetupFailed, Err: bindings.ErrNoStore,
			Msg: fmt.Sprintf("the %s stream %s does not exist on %s", what, name, nc.ConnectedUrlRedacted())}
	case err != nil:
		return fmt.Errorf("look up stream %s: %w", name, err)
	}
	return nil
}
