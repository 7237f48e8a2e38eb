package supervisor

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/hintserver"
	"github.com/localcloud/localcloud/internal/testutil"
)

// TestTakenDefaultPort: a stack without notify.listen whose default port
// is taken starts on a free port, logs why and writes it to runtime.json;
// the same port set in the stack file fails the start.
func TestTakenDefaultPort(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "stack.yaml")
	writeFile(t, file, "version: 1\nname: shop\nexplorer: off\nbindings:\n  orders:\n    type: queue\n")
	st := load(t, file)
	def := config.DefaultListen(st.DataDir)
	l, err := net.Listen("tcp", def)
	if err != nil {
		t.Skipf("cannot hold the default port %s for the test: %v", def, err)
	}
	defer l.Close()

	logs := &testutil.SyncBuffer{}
	s, err := Start(ctx, st, Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), HealthInterval: -1, NoWatch: true})
	if err != nil {
		t.Fatalf("start with the default port taken: %v", err)
	}
	defer s.Close()
	if strings.HasSuffix(s.URL(), def[strings.LastIndexByte(def, ':'):]) {
		t.Errorf("URL %s is on the taken port %s", s.URL(), def)
	}
	if !strings.Contains(logs.String(), "default NATS port is taken") || !strings.Contains(logs.String(), def) {
		t.Errorf("no warning naming %s:\n%s", def, logs)
	}
	rt, err := ReadRuntime(st.DataDir)
	if err != nil || rt.NATSURL != s.URL() {
		t.Errorf("runtime.json natsUrl %v, %v; want %s", rt, err, s.URL())
	}

	given := filepath.Join(t.TempDir(), "stack.yaml")
	writeFile(t, given, "version: 1\nname: shop\nexplorer: off\nnotify:\n  listen: "+def+"\nbindings: {}\n")
	if s2, err := Start(ctx, load(t, given), Options{HealthInterval: -1, NoWatch: true}); !errors.Is(err, hintserver.ErrAddrInUse) {
		if s2 != nil {
			s2.Close()
		}
		t.Errorf("start with the given port %s taken: %v, want ErrAddrInUse", def, err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(given), config.DefaultDataDir)); err == nil {
		t.Errorf("the failed start created its data dir")
	}
}
