package powercuttest

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// The environment of a child process.
const (
	envRole       = "LOCALCLOUD_POWERCUT_ROLE" // producer, consumer, acker, redriver, kv
	envName       = "LOCALCLOUD_POWERCUT_NAME" // unique per child
	envDir        = "LOCALCLOUD_POWERCUT_DIR"  // the mount: stores q, dlq, kv
	envLedger     = "LOCALCLOUD_POWERCUT_LEDGER"
	envDurability = "LOCALCLOUD_POWERCUT_DURABILITY"
	envEngine     = "LOCALCLOUD_POWERCUT_ENGINE" // sqlite or jetstream
	envURL        = "LOCALCLOUD_POWERCUT_URL"    // the JetStream server's
)

// jetstream reports whether the children use the JetStream engine.
func jetstream() bool { return os.Getenv(envEngine) == "jetstream" }

// startJetStream runs an embedded NATS server with JetStream whose store is
// under dir, with the settings the README recommends for durability d:
// lazy sync (the server's default, every 2 minutes) for normal, an fsync
// per write (SyncAlways) for full.
func startJetStream(t testing.TB, dir string, d bindings.Durability) *server.Server {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: filepath.Join(dir, "js"), SyncAlways: d == bindings.DurabilityFull})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("JetStream server not ready")
	}
	return srv
}

// openQueue opens the queue "q" of the round on the children's engine.
func openQueue(t testing.TB, dir string, d bindings.Durability) *queue.Queue {
	ctx := context.Background()
	if jetstream() {
		nc, err := nats.Connect(os.Getenv(envURL))
		if err != nil {
			t.Fatal(err)
		}
		q, err := queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: nc}, "q", queue.WithPollInterval(5*time.Millisecond),
			queue.WithRetryDelay(time.Millisecond), queue.WithMaxRetryDelay(2*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	q, err := queue.Open(ctx, filepath.Join(dir, "q"), queueOpts(dir, d)...)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// openKV opens the kv store "kv" of the round on the children's engine.
func openKV(t testing.TB, dir string, d bindings.Durability) *kv.Store {
	ctx := context.Background()
	if jetstream() {
		nc, err := nats.Connect(os.Getenv(envURL))
		if err != nil {
			t.Fatal(err)
		}
		s, err := kv.OpenEngine(ctx, jsengine.KVEngine{Conn: nc}, "kv")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s, err := kv.Open(ctx, filepath.Join(dir, "kv"), kv.WithDurability(d))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// maxAttempts is the queue's dead-letter policy.
const maxAttempts = 2

// ledger is a child's record of what it was told, outside the mount: one
// line per write(2), so a SIGKILL never leaves half a line and every line
// written is kept (the kernel holds it; only the mount loses power).
type ledger struct{ f *os.File }

func (l ledger) add(kind, subject string) {
	line := fmt.Sprintf("%s %d %s\n", kind, time.Now().UnixNano(), subject)
	if _, err := l.f.WriteString(line); err != nil {
		panic(err)
	}
}

// poison payloads always fail their handler and end in the dead-letter queue.
func poison(payload string) bool { return strings.HasSuffix(payload, "-poison") }

func queueOpts(dir string, d bindings.Durability) []queue.Option {
	return []queue.Option{
		queue.WithDurability(d),
		queue.WithDeadLetter(maxAttempts, filepath.Join(dir, "dlq")),
		queue.WithPollInterval(5 * time.Millisecond),
		queue.WithRetryDelay(time.Millisecond),
		queue.WithMaxRetryDelay(2 * time.Millisecond),
	}
}

func dlqOpts(dir string, d bindings.Durability) []queue.Option {
	return []queue.Option{queue.WithDurability(d), queue.WithMoveTargets(filepath.Join(dir, "q"))}
}

// TestPowercutChild is the body of every child process; run directly, it
// skips.
func TestPowercutChild(t *testing.T) {
	role := os.Getenv(envRole)
	if role == "" {
		t.Skip("a helper process of TestPowercut")
	}
	signal.Ignore(syscall.SIGPIPE)
	dir, name := os.Getenv(envDir), os.Getenv(envName)
	d := bindings.Durability(os.Getenv(envDurability))
	f, err := os.OpenFile(os.Getenv(envLedger), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	led := ledger{f}
	ctx := context.Background()
	switch role {
	case "jsserver":
		srv := startJetStream(t, dir, d)
		fmt.Println("ready " + srv.ClientURL())
		select {}
	case "producer":
		q := openQueue(t, dir, d)
		fmt.Println("ready")
		for i := 0; ; i++ {
			p := fmt.Sprintf("m-%s-%d", name, i)
			if i%7 == 3 && !jetstream() { // no dead-letter queue on JetStream here
				p += "-poison"
			}
			led.add("T", p)
			if err := q.Send(ctx, queue.Text(p)); err != nil {
				t.Fatalf("send %s: %v", p, err)
			}
			led.add("S", p)
		}
	case "consumer":
		q := openQueue(t, dir, d)
		fmt.Println("ready")
		err := q.Consume(ctx, func(_ context.Context, m queue.Message) error {
			if poison(m.Payload.Data) {
				return fmt.Errorf("poison")
			}
			led.add("H", m.Payload.Data) // handled: the ack may or may not commit
			return nil
		}, queue.ConsumeWorkers(2), queue.ConsumeRetryDelay(time.Millisecond), queue.ConsumeMaxRetryDelay(2*time.Millisecond))
		t.Fatalf("consume: %v", err)
	case "acker":
		q := openQueue(t, dir, d)
		fmt.Println("ready")
		for {
			ms, err := q.Receive(ctx, 5)
			if err != nil {
				t.Fatalf("receive: %v", err)
			}
			if len(ms) == 0 {
				time.Sleep(2 * time.Millisecond)
			}
			for _, m := range ms {
				if poison(m.Payload.Data) {
					if err := q.Nack(ctx, m.ReceiptHandle); err != nil {
						t.Fatalf("nack: %v", err)
					}
					continue
				}
				led.add("a", m.Payload.Data) // acking: the ack may or may not commit
				if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
					t.Fatalf("ack: %v", err)
				}
				led.add("A", m.Payload.Data)
			}
		}
	case "redriver":
		dlq, err := queue.Open(ctx, filepath.Join(dir, "dlq"), dlqOpts(dir, d)...)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println("ready")
		for {
			time.Sleep(20 * time.Millisecond)
			if _, err := dlq.Redrive(ctx, queue.RedriveMax(20)); err != nil {
				t.Fatalf("redrive: %v", err)
			}
		}
	case "kv":
		s := openKV(t, dir, d)
		fmt.Println("ready")
		for i := 0; ; i++ {
			// Every kv child races for the same keys.
			key, val := "k-"+strconv.Itoa(i), name+"-"+strconv.Itoa(i)
			led.add("t", key+" "+val)
			won, err := s.Put(ctx, key, []byte(val), kv.IfNotExists())
			if err != nil {
				t.Fatalf("put %s: %v", key, err)
			}
			if won {
				led.add("W", key+" "+val)
			}
			// A plain put overwriting the child's own counter.
			led.add("c", name+" "+strconv.Itoa(i))
			if _, err := s.Put(ctx, "c-"+name, []byte(strconv.Itoa(i))); err != nil {
				t.Fatalf("put counter: %v", err)
			}
			led.add("C", name+" "+strconv.Itoa(i))
		}
	default:
		t.Fatalf("unknown role %q", role)
	}
}
