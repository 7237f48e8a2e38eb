package config_test

import (
	"testing"

	"github.com/localcloud/localcloud/config"
)

// TestEmptySecretRefused: a secret that resolves to nothing would turn
// authentication off (NATS takes clients without a token, the explorer
// serves without a login), so it is an error naming the field and the
// variable; a set secret, or a field left out, is fine.
func TestEmptySecretRefused(t *testing.T) {
	t.Parallel()
	env := envOf(map[string]string{"EMPTY": "", "ALSO_EMPTY": "", "TOKEN": "s3cret", "CREDS": "app.creds"})
	const head = "version: 1\nname: shop\n"
	const servers = "jetstream:\n  servers: [nats://nats-1:4222]\n"
	for _, tc := range []struct {
		name, src string
		want      []string // nil: parses
	}{
		{"notify token from an empty variable", head + "notify:\n  token: ${EMPTY}\n",
			[]string{"4:10: notify.token: resolves to an empty value: environment variable EMPTY is set but empty (used as ${EMPTY}); " +
				"an empty secret would turn authentication off, so set EMPTY or leave notify.token out"}},
		{"notify token from two empty variables", head + "notify:\n  token: \"${EMPTY}${ALSO_EMPTY}\"\n",
			[]string{"4:10: notify.token: resolves to an empty value: environment variables EMPTY, ALSO_EMPTY are set but empty"}},
		{"notify token empty literal", head + "notify:\n  token: ''\n",
			[]string{"4:10: notify.token: must not be empty: an empty secret would turn authentication off; leave notify.token out for none"}},
		{"notify token set", head + "notify:\n  token: ${TOKEN}\n", nil},
		{"notify token null is none", head + "notify:\n  token:\n", nil},
		{"jetstream token from an empty variable", head + servers + "  token: ${EMPTY}\n",
			[]string{"5:10: jetstream.token: resolves to an empty value: environment variable EMPTY is set but empty (used as ${EMPTY})"}},
		{"jetstream token from an unset variable is read at connect", head + servers + "  token: ${UNSET}\n", nil},
		{"jetstream token set", head + servers + "  token: ${TOKEN}\n", nil},
		{"jetstream creds from an empty variable", head + servers + "  creds: ${EMPTY}\n",
			[]string{"5:10: jetstream.creds: resolves to an empty value: environment variable EMPTY is set but empty (used as ${EMPTY}); " +
				"an empty secret would turn authentication off, so set EMPTY or leave jetstream.creds out"}},
		{"jetstream creds empty literal", head + servers + "  creds: \"\"\n",
			[]string{"5:10: jetstream.creds: must not be empty"}},
		{"jetstream creds set", head + servers + "  creds: ${CREDS}\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := parseIn(t, t.TempDir(), tc.src, config.WithLookupEnv(env))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused:\n%v", err)
				}
				if s.Notify.Token == "" && tc.name == "notify token set" {
					t.Errorf("notify.token lost")
				}
				return
			}
			wantProblems(t, err, tc.want...)
		})
	}
}
