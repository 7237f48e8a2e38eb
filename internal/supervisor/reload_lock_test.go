package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/config"
)

// TestReloadReadsWithoutTheLock holds a reload inside its parse of the stack
// file (the ${NAME} lookup blocks) and checks that what needs the
// supervisor's lock (health checks, Runtime, Bindings) still answers, and
// that the reload applies once the parse goes on.
func TestReloadReadsWithoutTheLock(t *testing.T) {
	t.Parallel()
	inLookup, release := make(chan struct{}), make(chan struct{})
	lookup := func(name string) (string, bool) {
		if name != "BLOCK" {
			return "", false
		}
		close(inLookup)
		<-release
		return "kv", true
	}
	s, file, _ := start(t, stackText("  carts:\n    type: kv"), Options{
		NoWatch:     true,
		LoadOptions: []config.Option{config.WithLookupEnv(lookup)},
	})
	writeFile(t, file, stackText("  carts:\n    type: kv", "  more:\n    type: ${BLOCK}"))
	reloaded := make(chan error, 1)
	go func() {
		_, err := s.Reload(ctx, "test")
		reloaded <- err
	}()
	<-inLookup

	answered := make(chan struct{})
	go func() {
		defer close(answered)
		s.CheckHealth()
		_ = s.Runtime()
		_ = s.Bindings()
	}()
	select {
	case <-answered:
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("health check and Runtime waited for a reload that was reading the stack file")
	}
	close(release)
	if err := <-reloaded; err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Bindings(), ","); got != "carts,more" {
		t.Errorf("bindings after the reload = %s, want carts,more", got)
	}
}
