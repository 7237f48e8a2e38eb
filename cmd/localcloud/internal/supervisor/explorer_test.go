package supervisor

import (
	"strings"
	"testing"
)

func TestExplorerHandlesAndReloadWarning(t *testing.T) {
	t.Parallel()
	s, file, logs := start(t, stackText("  carts:\n    type: kv", "  orders:\n    type: queue"), Options{ExplorerURL: "http://127.0.0.1:1/"})
	if rt := s.Runtime(); rt.ExplorerURL != "http://127.0.0.1:1/" {
		t.Errorf("runtime explorerUrl = %q", rt.ExplorerURL)
	}
	if k, ok := s.KV("carts"); !ok || k == nil {
		t.Error("no KV handle for carts")
	}
	if _, ok := s.KV("orders"); ok {
		t.Error("a KV handle for a queue")
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
