package config_test

import (
	"testing"

	"github.com/localcloud/localcloud/config"
)

// TestSQSSection: on by default with a queue binding, off without one or
// with "sqs: off"; the key pair both or neither, never empty; a
// non-loopback listen only with the key pair.
func TestSQSSection(t *testing.T) {
	t.Parallel()
	env := envOf(map[string]string{"EMPTY": "", "KEY": "AKIDLOCAL", "SECRET": "s3cret"})
	const head = "version: 1\nname: shop\n"
	const queue = "bindings:\n  orders:\n    type: queue\n"
	const kv = "bindings:\n  carts:\n    type: kv\n"
	for _, tc := range []struct {
		name, src string
		want      config.SQS
		problems  []string
	}{
		{"default with a queue", head + queue, config.SQS{Enabled: true, Listen: config.DefaultSQSListen, Region: "us-east-1"}, nil},
		{"off without a queue", head + kv, config.SQS{Listen: config.DefaultSQSListen, Region: "us-east-1"}, nil},
		{"off", head + "sqs: off\n" + queue, config.SQS{Listen: config.DefaultSQSListen, Region: "us-east-1"}, nil},
		{"set", head + "sqs:\n  listen: 127.0.0.1:0\n  region: eu-west-1\n  accessKeyId: ${KEY}\n  secretAccessKey: ${SECRET}\n" + queue,
			config.SQS{Enabled: true, Listen: "127.0.0.1:0", ListenGiven: true, Region: "eu-west-1", AccessKeyID: "AKIDLOCAL", SecretAccessKey: "s3cret"}, nil},
		{"signed on every address", head + "sqs:\n  listen: 0.0.0.0:9324\n  accessKeyId: ${KEY}\n  secretAccessKey: ${SECRET}\n" + queue,
			config.SQS{Enabled: true, Listen: "0.0.0.0:9324", ListenGiven: true, Region: "us-east-1", AccessKeyID: "AKIDLOCAL", SecretAccessKey: "s3cret"}, nil},
		{"empty secret", head + "sqs:\n  accessKeyId: ${KEY}\n  secretAccessKey: ${EMPTY}\n" + queue, config.SQS{},
			[]string{"5:20: sqs.secretAccessKey: resolves to an empty value: environment variable EMPTY is set but empty (used as ${EMPTY})"}},
		{"key without secret", head + "sqs:\n  accessKeyId: ${KEY}\n" + queue, config.SQS{},
			[]string{"4:16: sqs.accessKeyId: is set without sqs.secretAccessKey"}},
		{"unsigned on every address", head + "sqs:\n  listen: 0.0.0.0:9324\n" + queue, config.SQS{},
			[]string{"4:11: sqs.listen: host must be a loopback address"}},
		{"bad region", head + "sqs:\n  region: Mars 1\n" + queue, config.SQS{},
			[]string{"4:11: sqs.region: must be a region name"}},
		{"unknown field", head + "sqs:\n  port: 1\n" + queue, config.SQS{},
			[]string{"4:3: sqs.port: unknown field; expected one of listen, region, accessKeyId, secretAccessKey"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := parseIn(t, t.TempDir(), tc.src, config.WithLookupEnv(env))
			if tc.problems != nil {
				wantProblems(t, err, tc.problems...)
				return
			}
			if err != nil {
				t.Fatalf("refused:\n%v", err)
			}
			if s.SQS != tc.want {
				t.Errorf("SQS = %+v, want %+v", s.SQS, tc.want)
			}
		})
	}
}
