package jsengine_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// TestExternalEnv: the External suites' variables, and a clear error, naming
// the variable and the value, for each bad setting.
func TestExternalEnv(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "user.creds")
	if err := os.WriteFile(creds, []byte("not checked here"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		want string // "" for no error
		urls int
		repl int
	}{
		{name: "unset", env: map[string]string{}},
		{name: "one URL", env: map[string]string{envURLs: "nats://127.0.0.1:4222"}, urls: 1, repl: 1},
		{name: "three URLs", env: map[string]string{envURLs: "nats://a:4222, nats://b:4222,tls://c"}, urls: 3, repl: 3},
		{name: "replicas", env: map[string]string{envURLs: "nats://a:4222,nats://b:4222", envReplicas: "1"}, urls: 2, repl: 1},
		{name: "token", env: map[string]string{envURLs: "nats://a:4222", envToken: "s3cret"}, urls: 1, repl: 1},
		{name: "creds", env: map[string]string{envURLs: "nats://a:4222", envCreds: creds}, urls: 1, repl: 1},
		{name: "http URL", env: map[string]string{envURLs: "nats://a:4222,http://b:4222"},
			want: `LOCALCLOUD_TEST_JETSTREAM_URLS: URL 2 "http://b:4222": scheme must be nats, tls, ws or wss, got "http"`},
		{name: "no scheme", env: map[string]string{envURLs: "a:4222"}, want: `URL 1 "a:4222": scheme must be`},
		{name: "empty URL", env: map[string]string{envURLs: "nats://a:4222,,nats://b"}, want: `LOCALCLOUD_TEST_JETSTREAM_URLS: URL 2 is empty`},
		{name: "empty variable", env: map[string]string{envURLs: ""}, want: `URL 1 is empty`},
		{name: "no host", env: map[string]string{envURLs: "nats://:4222"}, want: `URL 1 "nats://:4222": no host`},
		{name: "bad port", env: map[string]string{envURLs: "nats://a:99999"}, want: `port must be 1..65535, got "99999"`},
		{name: "unparsable", env: map[string]string{envURLs: "nats://a b:4222"}, want: `URL 1 "nats://a b:4222"`},
		{name: "user in URL", env: map[string]string{envURLs: "nats://u:p@a:4222"}, want: "credentials in the URL are not accepted"},
		{name: "replicas zero", env: map[string]string{envURLs: "nats://a", envReplicas: "0"},
			want: `LOCALCLOUD_TEST_JETSTREAM_REPLICAS: must be a whole number 1..5 (JetStream's replica limit), got "0"`},
		{name: "replicas six", env: map[string]string{envURLs: "nats://a", envReplicas: "6"}, want: `got "6"`},
		{name: "replicas word", env: map[string]string{envURLs: "nats://a", envReplicas: "three"}, want: `got "three"`},
		{name: "empty token", env: map[string]string{envURLs: "nats://a", envToken: ""},
			want: "LOCALCLOUD_TEST_JETSTREAM_TOKEN is set but empty"},
		{name: "missing creds file", env: map[string]string{envURLs: "nats://a", envCreds: "/nonexistent/x.creds"},
			want: `LOCALCLOUD_TEST_JETSTREAM_CREDS: cannot read the credentials file "/nonexistent/x.creds"`},
		{name: "token and creds", env: map[string]string{envURLs: "nats://a", envToken: "t", envCreds: creds},
			want: "LOCALCLOUD_TEST_JETSTREAM_TOKEN and LOCALCLOUD_TEST_JETSTREAM_CREDS are both set"},
		{name: "token without URLs", env: map[string]string{envToken: "t"},
			want: "LOCALCLOUD_TEST_JETSTREAM_TOKEN is set but LOCALCLOUD_TEST_JETSTREAM_URLS is not"},
		{name: "replicas without URLs", env: map[string]string{envReplicas: "3"},
			want: "LOCALCLOUD_TEST_JETSTREAM_REPLICAS is set but LOCALCLOUD_TEST_JETSTREAM_URLS is not"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := externalFromEnv(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("error %v; want one with %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.urls == 0 {
				if e != nil {
					t.Fatalf("a target %+v without %s", e, envURLs)
				}
				return
			}
			if e == nil || len(e.urls) != c.urls || e.replicas != c.repl {
				t.Fatalf("target %+v; want %d URLs, %d replicas", e, c.urls, c.repl)
			}
		})
	}
}

// TestExternalConnectAuth: against a server that wants a token, a missing
// token is an error that names the variable to set; a wrong one says to
// check it; the right one connects.
func TestExternalConnectAuth(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		Authorization: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	e := &external{urls: []string{srv.ClientURL()}, replicas: 1}
	if _, err := e.connect(); err == nil || !strings.Contains(err.Error(), "set LOCALCLOUD_TEST_JETSTREAM_TOKEN or LOCALCLOUD_TEST_JETSTREAM_CREDS") {
		t.Fatalf("connect without a token: %v; want a pointer to the variables", err)
	}
	e.token = "wrong"
	if _, err := e.connect(); err == nil || !strings.Contains(err.Error(), "check LOCALCLOUD_TEST_JETSTREAM_TOKEN") {
		t.Fatalf("connect with a wrong token: %v", err)
	}
	e.token = "s3cret"
	nc, err := e.connect()
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}
