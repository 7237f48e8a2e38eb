package config_test

import (
	"testing"

	"github.com/localcloud/localcloud/config"
)

func wantExplorer(want config.Explorer) func(*testing.T, *config.Stack) {
	return func(t *testing.T, s *config.Stack) {
		t.Helper()
		if s.Explorer != want {
			t.Errorf("Explorer = %+v, want %+v", s.Explorer, want)
		}
	}
}

func TestParseExplorer(t *testing.T) {
	t.Parallel()
	const head = "version: 1\nname: shop\n"
	def := config.Explorer{Enabled: true, Listen: config.DefaultExplorerListen}
	runRules(t, []ruleCase{
		{name: "default", src: head, check: wantExplorer(def)},
		{name: "null", src: head + "explorer:\n", check: wantExplorer(def)},
		{name: "on", src: head + "explorer: on\n", check: wantExplorer(def)},
		{name: "off", src: head + "explorer: off\n", check: wantExplorer(config.Explorer{Listen: config.DefaultExplorerListen})},
		{name: "false", src: head + "explorer: false\n", check: wantExplorer(config.Explorer{Listen: config.DefaultExplorerListen})},
		{name: "port 0 read-only", src: head + "explorer:\n  listen: 127.0.0.1:0\n  readOnly: true\n",
			check: wantExplorer(config.Explorer{Enabled: true, Listen: "127.0.0.1:0", ListenGiven: true, ReadOnly: true})},
		{name: "localhost", src: head + "explorer:\n  listen: localhost:8080\n",
			check: wantExplorer(config.Explorer{Enabled: true, Listen: "localhost:8080", ListenGiven: true})},
		{name: "other word", src: head + "explorer: maybe\n", want: []string{`3:11: explorer: must be off, on, or a mapping with listen and readOnly, got "maybe"`}},
		{name: "not loopback", src: head + "explorer:\n  listen: 0.0.0.0:4280\n",
			want: []string{`4:11: explorer.listen: host must be a loopback address (127.0.0.1, ::1 or localhost): the explorer can read and change every store; got "0.0.0.0"`}},
		{name: "no host", src: head + "explorer:\n  listen: \":4280\"\n",
			want: []string{`4:11: explorer.listen: host must be a loopback address`}},
		{name: "bad port", src: head + "explorer:\n  listen: 127.0.0.1:99999\n",
			want: []string{`4:11: explorer.listen: port must be between 0 and 65535 (0 picks a free port), got "99999"`}},
		{name: "no port", src: head + "explorer:\n  listen: 127.0.0.1\n",
			want: []string{`4:11: explorer.listen: must be host:port such as 127.0.0.1:4280, got "127.0.0.1"`}},
		{name: "readOnly not a bool", src: head + "explorer:\n  readOnly: yes please\n",
			want: []string{`4:13: explorer.readOnly: must be true or false, got "yes please"`}},
		{name: "unknown field", src: head + "explorer:\n  port: 4280\n",
			want: []string{"4:3: explorer.port: unknown field; expected one of listen, readOnly"}},
	})
}

// TestControlCharacterNamed checks that a control character is named with
// its line however shallow the file's brackets are: the hostile-stack e2e
// test feeds the binary itself, whose first bytes changed with every build.
func TestControlCharacterNamed(t *testing.T) {
	t.Parallel()
	_, err := parseIn(t, t.TempDir(), "version: 1\nname: shop\nx: \x7f\n")
	wantProblems(t, err, "3:0: : invalid YAML: control character 0x7f is not allowed")
}
