// Package sqssdk drives localcloud's SQS API with real AWS clients (the
// Go SDK v2 here; boto3, the AWS CLI and the JavaScript SDK v3 as child
// processes) against a real `localcloud up` process. It is a module of its
// own so that the AWS SDK never reaches the go.mod of localcloud, and so
// never an app's `go list -deps`.
package sqssdk

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// binary is the localcloud binary built once by TestMain.
var binary string

// binaryEnv names a prebuilt localcloud binary that TestMain uses instead
// of building one: BenchmarkSQS of two builds with the same client code.
const binaryEnv = "LOCALCLOUD_SQSSDK_BINARY"

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		os.Exit(runHelper(role))
	}
	if bin := os.Getenv(binaryEnv); bin != "" {
		binary = bin // a prebuilt localcloud, e.g. main's for a before/after benchmark
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "sqssdk-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "localcloud")
	build := exec.Command("go", "build", "-o", binary, "./cmd/localcloud")
	build.Dir = filepath.Join("..", "..") // localcloud's module
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build localcloud:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// stack is a stack file in a temp dir and the up serving it.
type stack struct {
	dir, file string
	endpoint  string // the SQS API
	explorer  string // the explorer's URL, "" when it is off
	up        *exec.Cmd
	mu        sync.Mutex
	stderr    strings.Builder
	exited    chan struct{}
}

var (
	readyRE    = regexp.MustCompile(`msg=ready .*sqs=(http://\S+)`)
	explorerRE = regexp.MustCompile(`msg=ready .*explorer=(http://\S+)`)
)

// startStack writes a stack file with bindings (YAML under bindings:) and
// extra top-level YAML, starts `localcloud up` on it and waits for its
// ready line. up is stopped (SIGTERM, then SIGKILL) when the test ends.
func startStack(t testing.TB, extra, bindings string) *stack {
	t.Helper()
	s := &stack{dir: t.TempDir(), exited: make(chan struct{})}
	s.file = filepath.Join(s.dir, "stack.yaml")
	src := "version: 1\nname: shop\nnotify:\n  listen: 127.0.0.1:0\n" + extra + "bindings:\n" + bindings
	if !strings.Contains(extra, "explorer:") {
		src = strings.Replace(src, "bindings:\n", "explorer: off\nbindings:\n", 1)
	}
	if !strings.Contains(extra, "sqs:") {
		src = strings.Replace(src, "bindings:\n", "sqs:\n  listen: 127.0.0.1:0\nbindings:\n", 1)
	}
	if err := os.WriteFile(s.file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	s.start(t)
	return s
}

func (s *stack) start(t testing.TB) {
	t.Helper()
	s.exited = make(chan struct{})
	cmd := exec.Command(binary, "up", "-f", s.file)
	cmd.Dir = s.dir
	cmd.Stdout = io.Discard
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.up = cmd
	exited := s.exited
	go func() {
		_ = cmd.Wait()
		_ = pw.Close()
		close(exited)
	}()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.stderr.WriteString(line + "\n")
			s.mu.Unlock()
			if m := readyRE.FindStringSubmatch(line); m != nil {
				if e := explorerRE.FindStringSubmatch(line); e != nil {
					s.explorer = strings.TrimSuffix(e[1], "/")
				}
				ready <- m[1]
			}
		}
	}()
	t.Cleanup(func() { s.stop(t) })
	select {
	case s.endpoint = <-ready:
	case <-exited:
		t.Fatalf("up exited before it was ready:\n%s", s.log())
	case <-time.After(60 * time.Second):
		t.Fatalf("up not ready after 60 s:\n%s", s.log())
	}
}

func (s *stack) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// stop ends up with SIGTERM (SIGKILL after 10 s) and waits for it.
func (s *stack) stop(t testing.TB) {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.up.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.up.Process.Kill()
		<-s.exited
		t.Errorf("up did not stop within 10 s of SIGTERM:\n%s", s.log())
	}
}

// lc runs the localcloud CLI on the stack; it fails the test on a non-zero
// exit.
func (s *stack) lc(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, append(args, "-f", s.file)...)
	cmd.Dir = s.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("localcloud %v: %v\n%s\nup:\n%s", args, err, out, s.log())
	}
	return string(out)
}

// client is an SQS client of the Go SDK v2 on the stack's endpoint.
func (s *stack) client() *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(s.endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("localcloud", "localcloud", ""),
	})
}

func ctxOf(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// killUp ends up with SIGKILL, as a crash, and waits for it.
func (s *stack) killUp() {
	_ = s.up.Process.Kill()
	<-s.exited
}
