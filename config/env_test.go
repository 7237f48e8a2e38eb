package config_test

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localcloud/localcloud/config"
)

// recordingEnv is a lookup over m that remembers which names were asked for.
type recordingEnv struct {
	mu    sync.Mutex
	m     map[string]string
	asked []string
}

func (e *recordingEnv) lookup(name string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.asked = append(e.asked, name)
	v, ok := e.m[name]
	return v, ok
}

func TestEnvExpansionSet(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := map[string]string{
		"DATA":  "state",
		"TOKEN": "s3cret",
		"N":     "7",
		"VT":    "2m",
		"Q":     "queue",
		"EMPTY": "",
	}
	s := mustParse(t, dir, `version: 1
name: shop
dataDir: ${DATA}/lc
notify:
  listen: 0.0.0.0:4222
  token: "${TOKEN}${EMPTY}"
bindings:
  orders:
    type: ${Q}
    visibilityTimeout: ${VT}
    maxAttempts: ${N}
    deadLetter: dlq
  dlq:
    type: queue
`, config.WithLookupEnv(envOf(env)))
	if want := filepath.Join(dir, "state", "lc"); s.DataDir != want {
		t.Errorf("DataDir = %q, want %q", s.DataDir, want)
	}
	if s.Notify.Token != "s3cret" {
		t.Errorf("Token = %q, want s3cret", s.Notify.Token)
	}
	o := binding(t, s, "orders")
	if o.Type != config.TypeQueue || o.VisibilityTimeout != 2*time.Minute || o.MaxAttempts != 7 {
		t.Errorf("orders = %+v; want queue, 2m, 7 attempts", o)
	}
}

func TestEnvExpansionUnset(t *testing.T) {
	t.Parallel()
	_, err := parseIn(t, t.TempDir(), `version: 1
name: shop
notify:
  token: ${NATS_TOKEN}
bindings:
  orders:
    type: queue
    path: ${ORDERS_DIR}/a/${ORDERS_DIR}/${OTHER}
`, config.WithLookupEnv(envOf(map[string]string{"OTHER": "x"})))
	wantProblems(t, err,
		"4:10: notify.token: environment variable NATS_TOKEN is not set (used as ${NATS_TOKEN}; write $$ for a literal $)",
		"8:11: bindings.orders.path: environment variable ORDERS_DIR is not set",
	)
}

func TestEnvExpansionEscapes(t *testing.T) {
	t.Parallel()
	env := &recordingEnv{m: map[string]string{"USER": "ann"}}
	s := mustParse(t, t.TempDir(), `version: 1
name: shop
notify:
  token: "a$$b $${USER} $USER ${USER} $$$${USER} 5$ $"
`, config.WithLookupEnv(env.lookup))
	if want := "a$b ${USER} $USER ann $${USER} 5$ $"; s.Notify.Token != want {
		t.Errorf("Token = %q, want %q", s.Notify.Token, want)
	}
	if len(env.asked) != 1 || env.asked[0] != "USER" {
		t.Errorf("looked up %q, want USER once", env.asked)
	}
}

func TestEnvExpansionBadReferences(t *testing.T) {
	t.Parallel()
	_, err := parseIn(t, t.TempDir(), `version: 1
name: shop
dataDir: ${DATA
notify:
  token: ${1X}${}${A:-b}
`)
	wantProblems(t, err,
		"3:10: dataDir: ${ without a closing }; write $$ for a literal $",
		`5:10: notify.token: bad variable name "1X" in ${...}`,
		`5:10: notify.token: bad variable name "" in ${...}`,
		`5:10: notify.token: bad variable name "A:-b" in ${...}`,
	)
}

func TestEnvCannotInjectStructure(t *testing.T) {
	t.Parallel()
	env := map[string]string{"T": "kv\n    path: /etc", "DL": "x\ny"}
	_, err := parseIn(t, t.TempDir(), hdr+
		"  carts:\n"+
		"    type: ${T}\n"+
		"  orders:\n"+
		"    type: queue\n"+
		"    maxAttempts: 2\n"+
		"    deadLetter: ${DL}\n",
		config.WithLookupEnv(envOf(env)))
	wantProblems(t, err,
		`5:11: bindings.carts.type: must be kv or queue, got "kv\n    path: /etc"`,
		`9:17: bindings.orders.deadLetter: must name a queue binding of this stack, got "x\ny"`,
	)
	if n := strings.Count(err.Error(), "\n"); n != 1 {
		t.Errorf("Error() has %d newlines, want 1 (one line per problem):\n%v", n, err)
	}
}

func TestEnvNotExpandedInKeys(t *testing.T) {
	t.Parallel()
	env := &recordingEnv{m: map[string]string{"NAME": "carts"}}
	_, err := parseIn(t, t.TempDir(), hdr+"  ${NAME}:\n    type: kv\n", config.WithLookupEnv(env.lookup))
	wantProblems(t, err, `4:3: bindings["${NAME}"]: binding name must match`)
	if len(env.asked) != 0 {
		t.Errorf("looked up %q in a key", env.asked)
	}
}

func TestEnvInWrongTypeStaysWrong(t *testing.T) {
	t.Parallel()
	env := map[string]string{"N": "many"}
	_, err := parseIn(t, t.TempDir(), hdr+
		"  orders:\n"+
		"    type: queue\n"+
		"    maxAttempts: ${N}\n"+
		"    deadLetter: dlq\n"+
		"  dlq:\n"+
		"    type: queue\n", config.WithLookupEnv(envOf(env)))
	wantProblems(t, err, `6:18: bindings.orders.maxAttempts: must be an integer between 1 and 1000, got "many"`)
}
