package testutil

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// StartJetStream starts a real embedded NATS server with JetStream on a
// free loopback port, its store in a temp dir, requiring token when it is
// not "", and returns its URL; t.Cleanup stops it.
func StartJetStream(t testing.TB, token string) string {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: t.TempDir(), Authorization: token})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("JetStream server not ready")
	}
	return srv.ClientURL()
}
