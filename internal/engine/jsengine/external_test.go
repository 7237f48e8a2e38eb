package jsengine_test

// The conformance suites against a JetStream server or cluster you run
// (README, "Running the conformance suites against a cluster"):
//
//	LOCALCLOUD_TEST_JETSTREAM_URLS=nats://a:4222,nats://b:4222,nats://c:4222 \
//	LOCALCLOUD_TEST_JETSTREAM_REPLICAS=3 LOCALCLOUD_TEST_JETSTREAM_TOKEN=... \
//	go test -run 'External' ./internal/engine/jsengine
//
// Without LOCALCLOUD_TEST_JETSTREAM_URLS the External suites skip. Every
// bucket and queue they make is named "lct<run id>_..." (a random id per
// run), and at the end each test deletes the streams whose names carry its
// run id, and no others.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/kv/kvtest"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/bindings/queue/queuetest"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// The variables that point the External suites at a server or cluster.
const (
	envURLs     = "LOCALCLOUD_TEST_JETSTREAM_URLS"     // required: nats://host:port, comma-separated
	envReplicas = "LOCALCLOUD_TEST_JETSTREAM_REPLICAS" // 1..5; default 1 for one URL, 3 for several
	envToken    = "LOCALCLOUD_TEST_JETSTREAM_TOKEN"    // the server's auth token
	envCreds    = "LOCALCLOUD_TEST_JETSTREAM_CREDS"    // or a .creds file (user JWT and NKey seed)
)

// external is a server or cluster the suites run against.
type external struct {
	urls     []string
	replicas int
	token    string
	creds    string
}

// externalFromEnv reads the variables through lookup (os.LookupEnv); nil
// and no error when none is set.
func externalFromEnv(lookup func(string) (string, bool)) (*external, error) {
	raw, ok := lookup(envURLs)
	if !ok {
		for _, v := range []string{envReplicas, envToken, envCreds} {
			if _, set := lookup(v); set {
				return nil, fmt.Errorf("%s is set but %s is not: set it to the servers' URLs (nats://host:4222,...) or unset %s", v, envURLs, v)
			}
		}
		return nil, nil
	}
	e := &external{}
	for i, s := range strings.Split(raw, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			return nil, fmt.Errorf("%s: URL %d is empty in %q: want nats://host:port, comma-separated", envURLs, i+1, raw)
		}
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("%s: URL %d %q: %v", envURLs, i+1, s, err)
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return nil, fmt.Errorf("%s: URL %d %q: scheme must be nats, tls, ws or wss, got %q", envURLs, i+1, s, u.Scheme)
		}
		if u.Hostname() == "" {
			return nil, fmt.Errorf("%s: URL %d %q: no host", envURLs, i+1, s)
		}
		if u.User != nil {
			return nil, fmt.Errorf("%s: URL %d: credentials in the URL are not accepted (they would show in logs): use %s or %s", envURLs, i+1, envToken, envCreds)
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return nil, fmt.Errorf("%s: URL %d %q: port must be 1..65535, got %q", envURLs, i+1, s, p)
			}
		}
		e.urls = append(e.urls, s)
	}
	e.replicas = 1
	if len(e.urls) > 1 {
		e.replicas = 3
	}
	if v, ok := lookup(envReplicas); ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > 5 {
			return nil, fmt.Errorf("%s: must be a whole number 1..5 (JetStream's replica limit), got %q", envReplicas, v)
		}
		e.replicas = n
	}
	token, hasToken := lookup(envToken)
	creds, hasCreds := lookup(envCreds)
	switch {
	case hasToken && hasCreds:
		return nil, fmt.Errorf("%s and %s are both set: set one of them", envToken, envCreds)
	case hasToken && token == "":
		return nil, fmt.Errorf("%s is set but empty: set it to the server's token, or unset it for a server without auth", envToken)
	case hasCreds && creds == "":
		return nil, fmt.Errorf("%s is set but empty: set it to a .creds file, or unset it", envCreds)
	case hasCreds:
		if _, err := os.Stat(creds); err != nil {
			return nil, fmt.Errorf("%s: cannot read the credentials file %q: %v", envCreds, creds, err)
		}
	}
	e.token, e.creds = token, creds
	return e, nil
}

// connect opens a connection to the target; an authorization failure says
// which variable to set.
func (e *external) connect() (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("localcloud jsengine external tests"), nats.Timeout(5 * time.Second)}
	switch {
	case e.token != "":
		opts = append(opts, nats.Token(e.token))
	case e.creds != "":
		opts = append(opts, nats.UserCredentials(e.creds))
	}
	nc, err := nats.Connect(strings.Join(e.urls, ","), opts...)
	if err == nil {
		return nc, nil
	}
	if errors.Is(err, nats.ErrAuthorization) || strings.Contains(strings.ToLower(err.Error()), "authorization") {
		if e.token == "" && e.creds == "" {
			return nil, fmt.Errorf("connect to %s: %w (the server wants credentials: set %s or %s)", strings.Join(e.urls, ","), err, envToken, envCreds)
		}
		return nil, fmt.Errorf("connect to %s: %w (check %s / %s)", strings.Join(e.urls, ","), err, envToken, envCreds)
	}
	return nil, fmt.Errorf("connect to %s: %w", strings.Join(e.urls, ","), err)
}

// externalTarget returns the target of the External suites, skipping the
// test when none is set and failing it on a bad setting.
func externalTarget(t *testing.T) *external {
	t.Helper()
	e, err := externalFromEnv(os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	if e == nil {
		t.Skipf("%s is not set: no server or cluster of yours to run against", envURLs)
	}
	return e
}

// externalRun connects to e for the whole test and returns the connection
// and this run's name prefix; at the end it deletes the streams whose
// names carry the prefix.
func externalRun(t *testing.T, e *external) (*nats.Conn, string) {
	t.Helper()
	nc, err := e.connect()
	if err != nil {
		t.Fatal(err)
	}
	prefix := "lct" + strings.ReplaceAll(uuid.NewString(), "-", "")[:10] + "_"
	t.Cleanup(func() {
		defer nc.Close()
		n, err := deleteStreamsOf(nc, prefix)
		if err != nil {
			t.Errorf("delete the streams of this run (%s*): %v", prefix, err)
		}
		t.Logf("deleted %d streams of this run (names with %s)", n, prefix)
	})
	return nc, prefix
}

// deleteStreamsOf deletes the streams whose names contain prefix (the
// engine's names are LCKV_<name>, LCQ_<name>, LCQE_<name>, with <name>
// starting with it).
func deleteStreamsOf(nc *nats.Conn, prefix string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	var mine []string
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		if _, rest, ok := strings.Cut(name, "_"); ok && strings.HasPrefix(rest, prefix) {
			mine = append(mine, name)
		}
	}
	if err := names.Err(); err != nil {
		return 0, fmt.Errorf("list streams: %w", err)
	}
	for i, name := range mine {
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return i, fmt.Errorf("delete stream %q: %w", name, err)
		}
	}
	return len(mine), nil
}

// TestKVConformanceExternal runs the kv suite on the server or cluster
// LOCALCLOUD_TEST_JETSTREAM_URLS names.
func TestKVConformanceExternal(t *testing.T) {
	e := externalTarget(t)
	nc, prefix := externalRun(t, e)
	kvtest.Run(t, func(t *testing.T) kvtest.Harness {
		loc := freshName(prefix + "kv")
		return kvtest.Harness{
			Open: func(t *testing.T, opts ...kv.Option) *kv.Store {
				return retryOpen(t, func() (*kv.Store, error) {
					return kv.OpenEngine(context.Background(), jsengine.KVEngine{Conn: nc, Replicas: e.replicas}, loc, opts...)
				})
			},
			Persistent: true,
		}
	})
}

// TestQueueConformanceExternal runs the queue suite on the server or
// cluster LOCALCLOUD_TEST_JETSTREAM_URLS names.
func TestQueueConformanceExternal(t *testing.T) {
	e := externalTarget(t)
	nc, prefix := externalRun(t, e)
	eng := jsengine.QueueEngine{Conn: nc, Replicas: e.replicas}
	queuetest.Run(t, func(t *testing.T) queuetest.Harness {
		loc := freshName(prefix + "q")
		open := func(t *testing.T, loc string, opts ...queue.Option) *queue.Queue {
			return retryOpen(t, func() (*queue.Queue, error) {
				return queue.OpenEngine(context.Background(), eng, loc, opts...)
			})
		}
		return queuetest.Harness{
			Open: func(t *testing.T, opts ...queue.Option) *queue.Queue { return open(t, loc, opts...) },
			OpenSibling: func(t *testing.T, name string, opts ...queue.Option) *queue.Queue {
				return open(t, loc+"-"+name, opts...)
			},
			TryOpen: func(t *testing.T, opts ...queue.Option) (*queue.Queue, error) {
				return queue.OpenEngine(context.Background(), eng, loc, opts...)
			},
			Persistent: true,
			Caps:       jsQueueCaps,
			RefuseAcks: refuseAcks(loc),
		}
	})
}
