package supervisor

import (
	"errors"
	"strings"
	"testing"
)

func TestExplorerHandlesAndReloadWarning(t *testing.T) {
	t.Parallel()
	s, file, logs := start(t, stackText("  carts:\n    type: kv", "  orders:\n    type: queue"), Options{ExplorerURL: "http://127.0.0.1:1/"})
	if rt := s.Runtime(); rt.ExplorerURL != "http://127.0.0.1:1/" {
		t.Errorf("runtime explorerUrl = %q", rt.ExplorerURL)
	}
	if k, release, err := s.KV(t.Context(), "carts"); err != nil || k == nil {
		t.Errorf("no KV handle for carts: %v", err)
	} else {
		release()
	}
	if _, _, err := s.KV(t.Context(), "orders"); !errors.Is(err, ErrNotServed) {
		t.Errorf("KV of a queue = %v; want ErrNotServed", err)
	}
	if q, ok := s.Queue("orders"); !ok || q == nil {
		t.Error("no queue handle for orders")
	}
	if _, ok := s.Queue("nope"); ok {
		t.Error("a handle for an unknown binding")
	}
	writeFile(t, file, strings.Replace(stackText("  carts:\n    type: kv", "  orders:\n    type: queue"), "bindings:", "explorer:\n  readOnly: true\nbindings:", 1))
	if _, err := s.Reload(t.Context(), "test"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "explorer settings changed; they apply after a restart") {
		t.Errorf("no warning about the explorer change:\n%s", logs.String())
	}
}
