package asyncapi

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

	"github.com/localcloud/localcloud/notify"

	"github.com/localcloud/localcloud/internal/testutil"
)

// The official AsyncAPI 3.0.0 JSON schema, bundled (no network needed); see
// testdata/asyncapi/README.md for its origin and license.
var asyncAPISchemaPath = filepath.Join("testdata", "asyncapi", "asyncapi-3.0.0.schema.json")

var asyncAPISchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	return testutil.CompileSchema(asyncAPISchemaPath)
})

// validateAsyncAPI validates a JSON or YAML document against the official schema.
func validateAsyncAPI(t *testing.T, doc []byte, format Format) error {
	t.Helper()
	sch, err := asyncAPISchema()
	if err != nil {
		t.Fatalf("compile the official AsyncAPI schema: %v", err)
	}
	return sch.Validate(decodeDoc(t, doc, format))
}

// decodeDoc decodes a document into the generic values the validator takes.
func decodeDoc(t *testing.T, doc []byte, format Format) any {
	t.Helper()
	if format == FormatYAML {
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			t.Fatalf("decode yaml: %v", err)
		}
		// Round-trip through JSON to get the validator's value types.
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("yaml document is not JSON-compatible: %v", err)
		}
		doc = j
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatalf("decode json: %v", err)
	}
	return v
}

var testAsyncAPIInput = Input{
	StackName:   "shop",
	Title:       "Shop hints",
	Version:     "1.2.3",
	Bindings:    []string{"orders", "emails", "orders", "audit-log"},
	DefaultHost: "127.0.0.1:4333",
}

func TestAsyncAPIValidAgainstOfficialSchema(t *testing.T) {
	t.Parallel()
	for _, format := range []Format{FormatJSON, FormatYAML} {
		in := testAsyncAPIInput
		in.Format = format
		doc, err := Generate(in)
		if err != nil {
			t.Fatal(err)
		}
		if err := validateAsyncAPI(t, doc, format); err != nil {
			t.Errorf("%s document is not valid AsyncAPI 3.0.0: %v\n%s", format, err, doc)
		}
	}
	// Defaults and no bindings still make a valid document.
	doc, err := Generate(Input{StackName: "empty"})
	if err != nil {
		t.Fatal(err)
	}
	if err := validateAsyncAPI(t, doc, FormatJSON); err != nil {
		t.Errorf("minimal document is not valid: %v\n%s", err, doc)
	}
}

// TestAsyncAPISchemaRejectsBrokenDocuments proves that the validation above can fail: each
// mutation of a valid generated document must be rejected by the official schema.
func TestAsyncAPISchemaRejectsBrokenDocuments(t *testing.T) {
	t.Parallel()
	doc, err := Generate(testAsyncAPIInput)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(d map[string]any){
		"operation with invalid action": func(d map[string]any) {
			op(d, "orders.receive")["action"] = "publish"
		},
		"operation without channel": func(d map[string]any) {
			delete(op(d, "orders.send"), "channel")
		},
		"channel with unknown field": func(d map[string]any) {
			d["channels"].(map[string]any)["orders"].(map[string]any)["subject"] = "x"
		},
		"channel address not a string": func(d map[string]any) {
			d["channels"].(map[string]any)["orders"].(map[string]any)["address"] = 42
		},
		"server without protocol": func(d map[string]any) {
			delete(d["servers"].(map[string]any)["localcloud"].(map[string]any), "protocol")
		},
		"info without version": func(d map[string]any) {
			delete(d["info"].(map[string]any), "version")
		},
		"wrong asyncapi version": func(d map[string]any) { d["asyncapi"] = "2.6.0" },
	}
	for name, mutate := range cases {
		var d map[string]any
		if err := json.Unmarshal(doc, &d); err != nil {
			t.Fatal(err)
		}
		mutate(d)
		broken, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		err = validateAsyncAPI(t, broken, FormatJSON)
		var verr *jsonschema.ValidationError
		if !errors.As(err, &verr) {
			t.Errorf("%s: validator returned %v, want a validation error", name, err)
		}
	}
}

func op(d map[string]any, id string) map[string]any {
	return d["operations"].(map[string]any)[id].(map[string]any)
}

func TestAsyncAPIContent(t *testing.T) {
	t.Parallel()
	doc, err := Generate(testAsyncAPIInput)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		AsyncAPI string `json:"asyncapi"`
		Info     struct{ Title, Version string }
		Servers  map[string]struct {
			Host, Protocol string
			Variables      map[string]struct{ Default string }
		}
		Channels map[string]struct {
			Address  string
			Messages map[string]struct {
				Ref string `json:"$ref"`
			}
		}
		Operations map[string]struct {
			Action  string
			Channel struct {
				Ref string `json:"$ref"`
			}
		}
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	if d.AsyncAPI != "3.0.0" || d.Info.Title != "Shop hints" || d.Info.Version != "1.2.3" {
		t.Errorf("header = %q %+v", d.AsyncAPI, d.Info)
	}
	srv := d.Servers["localcloud"]
	if srv.Host != "{host}" || srv.Protocol != "nats" || srv.Variables["host"].Default != "127.0.0.1:4333" {
		t.Errorf("server = %+v", srv)
	}
	if len(d.Channels) != 3 || len(d.Operations) != 6 {
		t.Fatalf("%d channels, %d operations; want 3 and 6 (bindings deduplicated)", len(d.Channels), len(d.Operations))
	}
	for _, b := range []string{"audit-log", "emails", "orders"} {
		ch := d.Channels[b]
		if ch.Address != "localcloud.shop."+b+".available" || ch.Address != notify.Subject("shop", b) {
			t.Errorf("channel %s address = %q", b, ch.Address)
		}
		if ch.Messages["hint"].Ref != "#/components/messages/hint" {
			t.Errorf("channel %s messages = %+v", b, ch.Messages)
		}
		for action, id := range map[string]string{"receive": b + ".receive", "send": b + ".send"} {
			o := d.Operations[id]
			if o.Action != action || o.Channel.Ref != "#/channels/"+b {
				t.Errorf("operation %s = %+v", id, o)
			}
		}
	}
}

func TestAsyncAPIDeterministic(t *testing.T) {
	t.Parallel()
	in := testAsyncAPIInput
	first, err := Generate(in)
	if err != nil {
		t.Fatal(err)
	}
	in.Bindings = []string{"audit-log", "orders", "emails"}
	second, err := Generate(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Fatal("binding order or duplicates changed the output")
	}
	if testAsyncAPIInput.Bindings[0] != "orders" {
		t.Fatal("AsyncAPI sorted the caller's slice")
	}

	in.Format = FormatYAML
	y1, err := Generate(in)
	if err != nil {
		t.Fatal(err)
	}
	y2, err := Generate(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(y1, y2) {
		t.Fatal("YAML output is not deterministic")
	}
	if !strings.HasPrefix(string(y1), "asyncapi: 3.0.0\n") {
		t.Fatalf("YAML starts with %q", strings.SplitN(string(y1), "\n", 2)[0])
	}
	// YAML and JSON carry the same document.
	j, y := decodeDoc(t, first, FormatJSON), decodeDoc(t, y1, FormatYAML)
	jb, _ := json.Marshal(j)
	yb, _ := json.Marshal(y)
	if !bytes.Equal(jb, yb) {
		t.Fatalf("YAML and JSON documents differ:\n%s\n%s", jb, yb)
	}
}

// TestAsyncAPIPayloadSchemaMatchesHint validates real hint payloads against the payload schema
// the document publishes, and checks that the schema rejects a wrong one.
func TestAsyncAPIPayloadSchemaMatchesHint(t *testing.T) {
	t.Parallel()
	doc, err := Generate(testAsyncAPIInput)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Components struct {
			Schemas map[string]any
		}
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("file:///hint.json", d.Components.Schemas["hint"]); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("file:///hint.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []notify.Hint{{Binding: "orders", Due: notify.DueUnknown, At: 1}, {Binding: "emails", Due: 12, At: 1767225600000}} {
		payload, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(decodeDoc(t, payload, FormatJSON)); err != nil {
			t.Errorf("hint %s does not match the published schema: %v", payload, err)
		}
	}
	for _, bad := range []string{`{"binding":"orders","due":-2,"at":1}`, `{"binding":"orders","at":1}`, `{"binding":"orders","due":1,"at":"now"}`} {
		if err := sch.Validate(decodeDoc(t, []byte(bad), FormatJSON)); err == nil {
			t.Errorf("schema accepted %s", bad)
		}
	}
}

func TestAsyncAPIRejectsBadInput(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]Input{
		"no stack":       {},
		"dotted stack":   {StackName: "a.b"},
		"dotted binding": {StackName: "shop", Bindings: []string{"a.b"}},
		"empty binding":  {StackName: "shop", Bindings: []string{""}},
	} {
		if _, err := Generate(in); !errors.Is(err, notify.ErrInvalidName) {
			t.Errorf("%s: err = %v, want notify.ErrInvalidName", name, err)
		}
	}
	if _, err := Generate(Input{StackName: "shop", Format: "xml"}); err == nil {
		t.Error("unknown format accepted")
	}
}
