package sqssdk

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// helperEnv selects a helper role when the test binary is re-executed:
// "producer" or "consumer" (see runHelper).
const helperEnv = "SQSSDK_HELPER"

// runHelper runs one helper process of TestManyProcesses and returns its
// exit code. Its settings are in the environment: SQSSDK_ENDPOINT, and for
// a producer SQSSDK_PRODUCER (its number) and SQSSDK_COUNT.
//
// A producer sends COUNT messages "p<N>-<i>" in batches of 10, retrying a
// failed batch until it succeeds (up may be down), and prints "retried K"
// at the end: a retried batch may have been stored already.
//
// A consumer receives batches of 10 and deletes them with
// DeleteMessageBatch, retrying while up is down. It prints "R <MessageId>
// <body>" for every message received and "D <MessageId>" for every
// successful delete, and exits after stdin is closed and a receive comes
// back empty.
func runHelper(role string) int {
	switch role {
	case "waiter":
		return runWaiter()
	case "floor":
		return runFloor()
	}
	ep := os.Getenv("SQSSDK_ENDPOINT")
	// No retries of the SDK's own: every retry is this loop's, so that a
	// producer counts the batches it may have stored twice.
	c := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(ep), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider("localcloud", "localcloud", "")})
	q := aws.String(ep + "/000000000000/orders")
	ctx := context.Background()
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	switch role {
	case "producer":
		id := os.Getenv("SQSSDK_PRODUCER")
		n, _ := strconv.Atoi(os.Getenv("SQSSDK_COUNT"))
		retried := 0
		for i := 0; i < n; i += 10 {
			var es []types.SendMessageBatchRequestEntry
			for j := i; j < min(i+10, n); j++ {
				es = append(es, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j - i)), MessageBody: aws.String(fmt.Sprintf("p%s-%d", id, j))})
			}
			for attempt := 0; ; attempt++ {
				r, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: q, Entries: es})
				if err == nil && len(r.Failed) == 0 {
					break
				}
				if attempt == 300 {
					fmt.Fprintln(os.Stderr, "producer gives up:", err)
					return 1
				}
				retried++
				time.Sleep(100 * time.Millisecond)
			}
		}
		fmt.Fprintf(out, "retried %d\n", retried)
		return 0
	case "consumer":
		stdinClosed := make(chan struct{})
		go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stdinClosed) }()
		failures := 0
		visibility := int32(60)
		if v, err := strconv.Atoi(os.Getenv("SQSSDK_VISIBILITY")); err == nil {
			visibility = int32(v)
		}
		for {
			r, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: visibility})
			if err != nil {
				if failures++; failures > 300 {
					fmt.Fprintln(os.Stderr, "consumer gives up:", err)
					return 1
				}
				time.Sleep(100 * time.Millisecond)
				continue
			}
			failures = 0
			if len(r.Messages) == 0 {
				select {
				case <-stdinClosed:
					return 0
				default:
					continue
				}
			}
			var es []types.DeleteMessageBatchRequestEntry
			ids := map[string]string{}
			for i, m := range r.Messages {
				fmt.Fprintf(out, "R %s %s\n", *m.MessageId, *m.Body)
				es = append(es, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
				ids[strconv.Itoa(i)] = *m.MessageId
			}
			out.Flush()
			for attempt := 0; ; attempt++ {
				d, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: q, Entries: es})
				if err == nil {
					for _, ok := range d.Successful {
						fmt.Fprintf(out, "D %s\n", ids[*ok.Id])
					}
					for _, f := range d.Failed {
						fmt.Fprintf(out, "F %s %s\n", ids[*f.Id], *f.Code)
					}
					break
				}
				if attempt == 300 {
					fmt.Fprintln(os.Stderr, "consumer gives up deleting:", err)
					return 1
				}
				time.Sleep(100 * time.Millisecond)
			}
			out.Flush()
		}
	}
	fmt.Fprintln(os.Stderr, "unknown helper role", role)
	return 2
}

// freePort returns a loopback port nothing listens on now.
func freePort(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// helper is a running helper process and its output.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	lines []string
	done  chan struct{} // closed once it exited and its output is read
	err   error         // its exit, once done is closed
}

// wait waits for the helper to exit and returns how.
func (h *helper) wait() error {
	<-h.done
	return h.err
}

func startHelper(t testing.TB, role string, env ...string) *helper {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{helperEnv + "=" + role}, env...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	read := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.mu.Lock()
			h.lines = append(h.lines, sc.Text())
			h.mu.Unlock()
		}
		close(read)
	}()
	go func() { <-read; h.err = cmd.Wait(); close(h.done) }()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-h.done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-h.done
		}
	})
	return h
}

func (h *helper) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, l := range h.lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// TestManyProcesses: 2 producer processes send 5,000 messages through the
// SQS API (batches of 10) while 4 consumer processes receive and delete
// them, once undisturbed and once with up SIGKILLed and restarted in the
// middle (clients retry) on a file binding, and once undisturbed on a
// JetStream binding. Every message arrives; no stored message (by its
// MessageId) is received twice (each was deleted within its lease: 60 s,
// 10 s in the killed run, where a receive whose answer was lost with up
// leaves its messages leased until then);
// none is received after its delete; the queue ends empty. A producer
// batch retried after a failure may have been stored twice: the
// duplicates are bounded by the retried batches.
func TestManyProcesses(t *testing.T) {
	for _, run := range []struct {
		name, engine string
		kill         bool
	}{{"steady", "sqlite", false}, {"upKilled", "sqlite", true}, {"jetstream", "jetstream", false}} {
		kill := run.kill
		t.Run(run.name, func(t *testing.T) {
			addr := freePort(t)
			s := startStack(t, "sqs:\n  listen: "+addr+"\n", "  orders:\n    type: queue\n    engine: "+run.engine+"\n")
			const perProducer = 2500
			env := "SQSSDK_ENDPOINT=" + s.endpoint
			// A receive whose answer was lost when up was killed leaves its
			// messages leased: SQS's and our contract is that they come back
			// when the visibility timeout ends, so the killed run uses a
			// shorter one and the consumers run until the queue is empty.
			visibility := "60"
			if kill {
				visibility = "10"
			}
			var consumers []*helper
			for range 4 {
				consumers = append(consumers, startHelper(t, "consumer", env, "SQSSDK_VISIBILITY="+visibility))
			}
			var producers []*helper
			for p := range 2 {
				producers = append(producers, startHelper(t, "producer", env, "SQSSDK_PRODUCER="+strconv.Itoa(p), "SQSSDK_COUNT="+strconv.Itoa(perProducer)))
			}
			received := func() int {
				n := 0
				for _, c := range consumers {
					n += c.count("R ")
				}
				return n
			}
			if kill {
				for received() < 1500 {
					time.Sleep(5 * time.Millisecond)
				}
				s.killUp()
				t.Logf("up SIGKILLed after %d receives", received())
				s.start(t)
			}
			retried := 0
			for _, p := range producers {
				if err := p.wait(); err != nil {
					t.Fatalf("producer: %v", err)
				}
				var k int
				for _, l := range p.lines {
					if _, err := fmt.Sscanf(l, "retried %d", &k); err == nil {
						retried += k
					}
				}
			}
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				if stats := s.lc(t, "queue", "stats", "orders", "--json"); strings.Contains(stats, `"total": 0`) || strings.Contains(stats, `"total":0`) {
					break
				}
			}
			for _, c := range consumers {
				_ = c.stdin.Close()
			}
			for _, c := range consumers {
				if err := c.wait(); err != nil {
					t.Fatalf("consumer: %v", err)
				}
			}
			bodies := map[string]int{}
			byID := map[string]int{}
			deleted := map[string]bool{}
			for ci, c := range consumers {
				for _, l := range c.lines {
					f := strings.Fields(l)
					switch f[0] {
					case "R":
						if deleted[f[1]] {
							t.Errorf("consumer %d received %s (%s) after its delete", ci, f[1], f[2])
						}
						byID[f[1]]++
						bodies[f[2]]++
					case "D":
						deleted[f[1]] = true
					case "F":
						t.Errorf("consumer %d: delete of %s failed: %s", ci, f[1], f[2])
					}
				}
			}
			for id, n := range byID {
				if n > 1 {
					t.Errorf("message %s received %d times", id, n)
				}
			}
			missing, dups := 0, 0
			for p := range 2 {
				for i := range perProducer {
					switch n := bodies[fmt.Sprintf("p%d-%d", p, i)]; {
					case n == 0:
						missing++
					case n > 1:
						dups += n - 1
					}
				}
			}
			if missing > 0 || dups > 10*retried {
				t.Fatalf("%d of %d messages lost, %d duplicates (%d producer batches retried)", missing, 2*perProducer, dups, retried)
			}
			if stats := s.lc(t, "queue", "stats", "orders", "--json"); !strings.Contains(stats, `"total": 0`) && !strings.Contains(stats, `"total":0`) {
				t.Fatalf("queue not empty: %s", stats)
			}
			t.Logf("%d messages, %d received, %d deleted, %d duplicates from %d retried producer batches", 2*perProducer, len(byID), len(deleted), dups, retried)
		})
	}
}
