package supervisor

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/localcloud/localcloud/internal/testutil"
	"github.com/localcloud/localcloud/internal/testutil/powercut"
)

// TestJetStreamStreamsSurviveAPowerCut: the streams up creates at start are
// still there after a power cut right after the start (nats-server does not
// fsync a new stream's directory into its parent; up does).
func TestJetStreamStreamsSurviveAPowerCut(t *testing.T) {
	p := powercut.Mount(t)
	file := filepath.Join(p.Dir(), "stack.yaml")
	writeFile(t, file, stackText("  orders:\n    type: queue\n    engine: jetstream\n    durability: full"))
	for _, d := range []string{p.Dir()} {
		f, err := os.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil { // the stack file was there long before
			t.Fatal(err)
		}
		f.Close()
	}
	st := load(t, file)
	s, err := Start(ctx, st, Options{NoWatch: true, HealthInterval: -1, Logger: slog.New(slog.NewTextHandler(&testutil.SyncBuffer{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(p.Dir(), st.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	p.Freeze() // the power goes; closing writes nothing durable
	s.Close()
	if _, err := p.Cut(powercut.CutOptions{}); err != nil {
		t.Fatal(err)
	}
	stream := filepath.Join(p.RealDir(), rel, JetStreamDir, "jetstream", "$G", "streams", "LCQ_orders")
	if fi, err := os.Stat(stream); err != nil || !fi.IsDir() {
		t.Fatalf("after a power cut right after up started, the stream up created is gone: %v", err)
	}
}
