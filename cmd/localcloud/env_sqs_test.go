package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestEnvExportsTheSQSVariables: with a queue binding, env exports
// AWS_ENDPOINT_URL_SQS (sqs.listen while up is not running), and the
// region and keys only where the environment lacks them; "sqs: off" (or
// no queue) exports none of them.
func TestEnvExportsTheSQSVariables(t *testing.T) {
	t.Parallel()
	signed := strings.Replace(goodStack, "bindings:\n", "sqs:\n  listen: 127.0.0.1:9555\n  region: eu-west-1\n  accessKeyId: AKIDSTACK\n  secretAccessKey: stacksecret\n"+
		"bindings:\n", 1)
	for _, tc := range []struct {
		name  string
		stack string
		env   map[string]string
		want  map[string]string // "" : not exported
	}{
		{"defaults", goodStack, nil, map[string]string{"AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:9324", "AWS_REGION": "us-east-1",
			"AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "localcloud", "AWS_SECRET_ACCESS_KEY": "localcloud"}},
		{"the stack's keys", signed, nil, map[string]string{"AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:9555", "AWS_REGION": "eu-west-1",
			"AWS_ACCESS_KEY_ID": "AKIDSTACK", "AWS_SECRET_ACCESS_KEY": "stacksecret"}},
		{"set ones are kept", signed, map[string]string{"AWS_REGION": "ap-south-1", "AWS_ACCESS_KEY_ID": "AKIDMINE", "AWS_SECRET_ACCESS_KEY": "mine"},
			map[string]string{"AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:9555", "AWS_REGION": "", "AWS_DEFAULT_REGION": "eu-west-1",
				"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}},
		{"off", strings.Replace(goodStack, "bindings:\n", "sqs: off\nbindings:\n", 1), nil, map[string]string{"AWS_ENDPOINT_URL_SQS": "",
			"AWS_REGION": "", "AWS_ACCESS_KEY_ID": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stack := writeStack(t, tc.stack)
			code, stdout, stderr := runApp(t, tc.env, "env", "-f", stack, "--json")
			if code != 0 {
				t.Fatalf("env: exit %d\n%s%s", code, stdout, stderr)
			}
			var got map[string]string
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}
