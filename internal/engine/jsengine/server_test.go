package jsengine_test

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// node is the package's one embedded JetStream server (single node, on
// loopback, a free port, its store in a temp dir), started by TestMain.
var node struct {
	srv *server.Server
	url string
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "jsengine-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// queuetest's DeadLetter/OptionsValidated opens the harness's location
	// with the SQLite engine (queue.Open(ctx, q.Location(), ...)); our
	// locations are names, so that would create stores in the package
	// directory: run the package in a temp working directory.
	cwd, err := os.MkdirTemp("", "jsengine-cwd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(cwd)
	if err := os.Chdir(cwd); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		NoSigs:    true,
		NoLog:     true,
		JetStream: true,
		StoreDir:  dir,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "configure server:", err)
		return 1
	}
	srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(10 * time.Second) {
		fmt.Fprintln(os.Stderr, "server not ready")
		return 1
	}
	node.srv, node.url = srv, srv.ClientURL()
	code := m.Run()
	atExit.Lock()
	for _, s := range atExit.srvs {
		s.Shutdown()
		s.WaitForShutdown()
	}
	for _, d := range atExit.dirs {
		os.RemoveAll(d)
	}
	atExit.Unlock()
	return code
}

// atExit holds what package-wide servers (the cluster) leave for TestMain
// to stop and remove.
var atExit struct {
	sync.Mutex
	srvs []*server.Server
	dirs []string
}

func stopAtExit(s *server.Server) {
	atExit.Lock()
	atExit.srvs = append(atExit.srvs, s)
	atExit.Unlock()
}

func tempDir() (string, error) {
	d, err := os.MkdirTemp("", "jsengine-cluster-")
	if err != nil {
		return "", err
	}
	atExit.Lock()
	atExit.dirs = append(atExit.dirs, d)
	atExit.Unlock()
	return d, nil
}

// connect opens a client connection closed at the end of the test.
func connect(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(node.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

var seq atomic.Int64

// freshName is a new bucket or queue name.
func freshName(base string) string {
	return fmt.Sprintf("%s%d", base, seq.Add(1))
}

func natsMsg(subject, data string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = []byte(data)
	return m
}

var natsConnect = func(url string) (*nats.Conn, error) { return nats.Connect(url) }
