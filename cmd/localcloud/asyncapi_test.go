package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/localcloud/localcloud/internal/testutil"
)

// The official AsyncAPI 3.0.0 JSON schema, kept as test data of package
// notify (see its README.md for origin and license).
var asyncAPISchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	return testutil.CompileSchema(filepath.Join("..", "..", "internal", "asyncapi", "testdata", "asyncapi", "asyncapi-3.0.0.schema.json"))
})

// validateAsyncAPI validates a JSON document against the official schema.
func validateAsyncAPI(t *testing.T, doc []byte) error {
	t.Helper()
	sch, err := asyncAPISchema()
	if err != nil {
		t.Fatalf("compile the official AsyncAPI schema: %v", err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatalf("decode json: %v\n%s", err, doc)
	}
	return sch.Validate(v)
}

const asyncAPIStack = `version: 1
name: shop
notify:
  listen: 127.0.0.1:4333
bindings:
  carts:
    type: kv
  orders:
    type: queue
    maxAttempts: 3
    deadLetter: orders-dlq
  orders-dlq:
    type: queue
`

func TestAsyncAPICommandOutputIsValidAsyncAPI3(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, asyncAPIStack)
	code, out, errOut := runApp(t, nil, "asyncapi", "-f", stack)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if err := validateAsyncAPI(t, []byte(out)); err != nil {
		t.Fatalf("not valid AsyncAPI 3.0.0: %v\n%s", err, out)
	}
	var d struct {
		AsyncAPI string `json:"asyncapi"`
		Servers  map[string]struct {
			Host, Protocol string
			Variables      map[string]struct{ Default string }
		}
		Channels   map[string]struct{ Address string }
		Operations map[string]struct{ Action string }
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	srv := d.Servers["localcloud"]
	if d.AsyncAPI != "3.0.0" || srv.Protocol != "nats" || srv.Host != "{host}" || srv.Variables["host"].Default != "127.0.0.1:4333" {
		t.Errorf("asyncapi %q, server %+v; want 3.0.0, nats, host variable defaulting to notify.listen", d.AsyncAPI, srv)
	}
	// One channel per queue binding (carts is a KV store), each with both
	// operations.
	if len(d.Channels) != 2 || d.Channels["orders"].Address != "localcloud.shop.orders.available" ||
		d.Channels["orders-dlq"].Address != "localcloud.shop.orders-dlq.available" {
		t.Errorf("channels = %+v", d.Channels)
	}
	for _, id := range []string{"orders.receive", "orders.send", "orders-dlq.receive", "orders-dlq.send"} {
		if want := id[strings.LastIndex(id, ".")+1:]; d.Operations[id].Action != want {
			t.Errorf("operation %s = %+v, want action %s", id, d.Operations[id], want)
		}
	}

	// YAML says the same.
	code, outYAML, errOut := runApp(t, nil, "asyncapi", "-f", stack, "--format", "yaml")
	if code != 0 {
		t.Fatalf("--format yaml: exit %d: %s", code, errOut)
	}
	var v any
	if err := yaml.Unmarshal([]byte(outYAML), &v); err != nil {
		t.Fatalf("yaml: %v\n%s", err, outYAML)
	}
	asJSON, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := validateAsyncAPI(t, asJSON); err != nil {
		t.Fatalf("yaml document not valid AsyncAPI 3.0.0: %v\n%s", err, outYAML)
	}
	var fromJSON, fromYAML any
	_ = json.Unmarshal([]byte(out), &fromJSON)
	_ = json.Unmarshal(asJSON, &fromYAML)
	if a, _ := json.Marshal(fromJSON); !bytes.Equal(a, mustJSON(t, fromYAML)) {
		t.Errorf("json and yaml documents differ:\n%s\n%s", out, outYAML)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAsyncAPISchemaRejectsBrokenCommandOutput shows that the validation
// above can fail: broken variants of the command's document are rejected.
func TestAsyncAPISchemaRejectsBrokenCommandOutput(t *testing.T) {
	t.Parallel()
	code, out, errOut := runApp(t, nil, "asyncapi", "-f", writeStack(t, asyncAPIStack))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	cases := map[string]func(d map[string]any){
		"operation action publish (AsyncAPI 2 wording)": func(d map[string]any) {
			d["operations"].(map[string]any)["orders.receive"].(map[string]any)["action"] = "publish"
		},
		"server without protocol": func(d map[string]any) {
			delete(d["servers"].(map[string]any)["localcloud"].(map[string]any), "protocol")
		},
		"asyncapi 2.6.0": func(d map[string]any) { d["asyncapi"] = "2.6.0" },
		"info without title": func(d map[string]any) {
			delete(d["info"].(map[string]any), "title")
		},
	}
	for name, mutate := range cases {
		var d map[string]any
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatal(err)
		}
		mutate(d)
		var verr *jsonschema.ValidationError
		if err := validateAsyncAPI(t, mustJSON(t, d)); !errors.As(err, &verr) {
			t.Errorf("%s: validator returned %v, want a validation error", name, err)
		}
	}
}

func TestAsyncAPICommandUsageMistakes(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, asyncAPIStack)
	for _, args := range [][]string{
		{"asyncapi", "-f", stack, "--format", "xml"},
		{"asyncapi", "-f", stack, "extra"},
	} {
		if code, _, errOut := runApp(t, nil, args...); code != exitUsage || !strings.Contains(errOut, "Try: ") {
			t.Errorf("%q: exit %d, stderr %q; want 2 with a Try line", args, code, errOut)
		}
	}
}
