package sqssdk

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// need returns the path of program, skipping the test when it is missing
// (failing it with CI=true: .ci/run installs every client).
func need(t *testing.T, program, why string) string {
	t.Helper()
	p, err := exec.LookPath(program)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is missing (%s); .ci/run installs it", program, why)
	}
	t.Skipf("%s is missing (%s); apt-get install -y python3-boto3 awscli, or run .ci/run", program, why)
	return ""
}

// pythonsWithBoto3 are the Python interpreters to run the boto3 app with:
// Debian's /usr/bin/python3 (python3-boto3 1.26, the Query protocol) and
// the python3 on PATH when it is another one with boto3 (a current boto3
// speaks the JSON protocol).
func pythonsWithBoto3(t *testing.T) []string {
	var out []string
	debian := "/usr/bin/python3"
	if exec.Command(debian, "-c", "import boto3").Run() == nil {
		out = append(out, debian)
	} else if os.Getenv("CI") == "true" {
		t.Fatalf("%s cannot import boto3; .ci/run installs python3-boto3", debian)
	}
	if p, err := exec.LookPath("python3"); err == nil {
		if r1, _ := filepath.EvalSymlinks(p); r1 != debian && exec.Command(p, "-c", "import boto3").Run() == nil {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		t.Skip("no python3 with boto3; apt-get install -y python3-boto3, or run .ci/run")
	}
	return out
}

// TestBoto3 runs testdata/boto3_client.py, an app with no localcloud code,
// under `localcloud run` (which exports AWS_ENDPOINT_URL_SQS, the region
// and keys) on a file and a JetStream binding; the CLI sees its messages
// and it sees the CLI's.
func TestBoto3(t *testing.T) {
	script, err := filepath.Abs(filepath.Join("testdata", "boto3_client.py"))
	if err != nil {
		t.Fatal(err)
	}
	for _, py := range pythonsWithBoto3(t) {
		for name, bindings := range engines {
			t.Run(name+"/"+py, func(t *testing.T) {
				t.Parallel()
				s := startStack(t, "", bindings)
				s.lc(t, "queue", "send", "orders", "from the CLI")
				cmd := exec.Command(binary, "run", "-f", s.file, "--", py, script)
				cmd.Dir = s.dir
				cmd.Env = cleanAWSEnv()
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
					t.Fatalf("%s: %v\n%s\nup:\n%s", py, err, out, s.log())
				}
				if py == "/usr/bin/python3" && !strings.Contains(string(out), "protocol query") {
					t.Errorf("Debian's boto3 did not use the Query protocol: %s", out)
				}
				t.Logf("%s", strings.SplitN(string(out), "\n", 2)[0])
				if peek := s.lc(t, "queue", "peek", "orders"); !strings.Contains(peek, "left for the CLI") {
					t.Fatalf("the CLI does not see the app's message:\n%s", peek)
				}
			})
		}
	}
}

// cleanAWSEnv is the test's environment without AWS settings, so that
// `localcloud run` exports its own, and with HOME elsewhere, so no
// ~/.aws file interferes.
func cleanAWSEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AWS_") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+os.TempDir())
}

// TestAWSCLI drives the API with Debian's AWS CLI (awscli 2.9, the Query
// protocol): send, receive with a long poll and attributes, delete,
// queue attributes, list, purge.
func TestAWSCLI(t *testing.T) {
	aws := "/usr/bin/aws"
	if _, err := os.Stat(aws); err != nil {
		aws = need(t, "aws", "Debian's awscli")
	}
	for name, bindings := range engines {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := startStack(t, "", bindings)
			run := func(args ...string) map[string]any {
				t.Helper()
				cmd := exec.Command(aws, append([]string{"--endpoint-url", s.endpoint, "--region", "us-east-1", "--output", "json", "sqs"}, args...)...)
				cmd.Env = append(cleanAWSEnv(), "AWS_ACCESS_KEY_ID=localcloud", "AWS_SECRET_ACCESS_KEY=localcloud", "AWS_PAGER=")
				out, err := cmd.Output()
				if err != nil {
					var stderr string
					if ee, ok := err.(*exec.ExitError); ok {
						stderr = string(ee.Stderr)
					}
					t.Fatalf("aws sqs %v: %v\n%s%s", args, err, out, stderr)
				}
				m := map[string]any{}
				if len(strings.TrimSpace(string(out))) > 0 {
					if err := json.Unmarshal(out, &m); err != nil {
						t.Fatalf("aws sqs %v: %v\n%s", args, err, out)
					}
				}
				return m
			}
			q := run("get-queue-url", "--queue-name", "orders")["QueueUrl"].(string)
			run("send-message", "--queue-url", q, "--message-body", "from the AWS CLI")
			if peek := s.lc(t, "queue", "peek", "orders"); !strings.Contains(peek, "from the AWS CLI") {
				t.Fatalf("peek:\n%s", peek)
			}
			s.lc(t, "queue", "send", "orders", "from the localcloud CLI")
			seen := map[string]string{}
			for len(seen) < 2 {
				r := run("receive-message", "--queue-url", q, "--max-number-of-messages", "10", "--wait-time-seconds", "5", "--attribute-names", "All")
				msgs, _ := r["Messages"].([]any)
				if len(msgs) == 0 {
					t.Fatalf("nothing received after %v", seen)
				}
				for _, m := range msgs {
					mm := m.(map[string]any)
					seen[mm["Body"].(string)] = mm["ReceiptHandle"].(string)
					if mm["Attributes"].(map[string]any)["ApproximateReceiveCount"] != "1" {
						t.Errorf("attributes = %v", mm["Attributes"])
					}
				}
			}
			run("delete-message", "--queue-url", q, "--receipt-handle", seen["from the AWS CLI"])
			a := run("get-queue-attributes", "--queue-url", q, "--attribute-names", "All")["Attributes"].(map[string]any)
			if a["ApproximateNumberOfMessagesNotVisible"] != "1" || a["MaximumMessageSize"] != "65536" {
				t.Fatalf("attributes = %v", a)
			}
			if urls := run("list-queues")["QueueUrls"].([]any); len(urls) != 2 {
				t.Fatalf("list-queues = %v", urls)
			}
			run("purge-queue", "--queue-url", q)
			if stats := s.lc(t, "queue", "stats", "orders", "--json"); !strings.Contains(stats, `"total": 0`) && !strings.Contains(stats, `"total":0`) {
				t.Fatalf("after purge: %s", stats)
			}
		})
	}
}

// nodeSDKVersion is the @aws-sdk/client-sqs the node test installs.
const nodeSDKVersion = "3.1175.0"

// nodeModules installs @aws-sdk/client-sqs (pinned) with npm into the user
// cache dir once and returns its node_modules.
func nodeModules(t *testing.T) string {
	t.Helper()
	npm := need(t, "npm", "node's package manager, for @aws-sdk/client-sqs")
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "localcloud-sqssdk", "client-sqs-"+nodeSDKVersion)
	mods := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(mods, "@aws-sdk", "client-sqs", "package.json")); err == nil {
		return mods
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(npm, "install", "--no-audit", "--no-fund", "--prefix", dir, "@aws-sdk/client-sqs@"+nodeSDKVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install @aws-sdk/client-sqs@%s: %v\n%s", nodeSDKVersion, err, out)
	}
	return mods
}

// TestNodeSDK runs testdata/node_client.cjs (the AWS SDK for JavaScript
// v3, JSON protocol, configured by the environment alone) under
// `localcloud run` on a file and a JetStream binding.
func TestNodeSDK(t *testing.T) {
	node := need(t, "node", "node.js, for the AWS SDK for JavaScript v3")
	mods := nodeModules(t)
	script, err := filepath.Abs(filepath.Join("testdata", "node_client.cjs"))
	if err != nil {
		t.Fatal(err)
	}
	for name, bindings := range engines {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := startStack(t, "", bindings)
			s.lc(t, "queue", "send", "orders", "from the CLI")
			cmd := exec.Command(binary, "run", "-f", s.file, "--", node, script)
			cmd.Dir = s.dir
			cmd.Env = append(cleanAWSEnv(), "NODE_PATH="+mods)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
				t.Fatalf("node: %v\n%s\nup:\n%s", err, out, s.log())
			}
			if peek := s.lc(t, "queue", "peek", "orders"); !strings.Contains(peek, "left for the CLI") {
				t.Fatalf("the CLI does not see the app's message:\n%s", peek)
			}
		})
	}
}
