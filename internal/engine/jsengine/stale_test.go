package jsengine_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// Stale receipts across a server restart (issue 22): receiver R1 holds a
// message; the JetStream server, an OS process of its own on a fixed store
// directory and port, is SIGKILLed and restarted; R1's receipt must then be
// refused (ErrStaleReceipt, nothing deleted) right after the restart and
// again after the message was delivered to R2, by R1's handle and by a
// handle opened after the restart (as `localcloud queue ack` would); R2's
// receipt acks, once.
const (
	staleServerDirEnv  = "LC_STALE_SERVER_DIR"
	staleServerPortEnv = "LC_STALE_SERVER_PORT"
	// staleTrialsEnv sets the number of trials (default staleTrials).
	staleTrialsEnv = "LOCALCLOUD_STALE_TRIALS"
	staleTrials    = 5
	// staleLease is the queue's consumer AckWait and R1's lease: long
	// enough for the restart, short enough for many trials.
	staleLease = 4 * time.Second
	// staleHold is how long R1 holds the message before the kill in every
	// second trial.
	staleHold = 2 * time.Second
)

// TestStaleServerHelper is the JetStream server process of
// TestStaleReceiptAcrossRestart; run directly it skips. It prints "ready"
// once it takes connections and runs until it is killed.
func TestStaleServerHelper(t *testing.T) {
	dir := os.Getenv(staleServerDirEnv)
	if dir == "" {
		t.Skip("a helper process of TestStaleReceiptAcrossRestart")
	}
	port, err := strconv.Atoi(os.Getenv(staleServerPortEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "stale helper: port:", err)
		os.Exit(2)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: dir, SyncAlways: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "stale helper:", err)
		os.Exit(2)
	}
	srv.Start()
	if !srv.ReadyForConnections(20 * time.Second) {
		fmt.Fprintln(os.Stderr, "stale helper: not ready")
		os.Exit(2)
	}
	fmt.Println("ready")
	select {} // until SIGKILL
}

// staleServer is the helper process serving dir on port.
type staleServer struct {
	t    *testing.T
	dir  string
	port int
	cmd  *exec.Cmd
}

// start runs the server process and waits until it is ready.
func (s *staleServer) start() {
	s.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStaleServerHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), staleServerDirEnv+"="+s.dir, staleServerPortEnv+"="+strconv.Itoa(s.port))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.cmd = cmd
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
				break
			}
		}
		ready <- false
		for sc.Scan() { // drain until the process ends
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			s.t.Fatal("server process ended before it was ready")
		}
	case <-time.After(30 * time.Second):
		s.t.Fatal("server process not ready after 30 s")
	}
}

// kill SIGKILLs the server process and reaps it.
func (s *staleServer) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill() // SIGKILL
	_ = s.cmd.Wait()
	s.cmd = nil
}

// staleTrialCount is LOCALCLOUD_STALE_TRIALS or the default.
func staleTrialCount(t *testing.T) int {
	n := staleTrials
	if v := os.Getenv(staleTrialsEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", staleTrialsEnv, v)
		}
	}
	return n
}

// receiptDeadline is the lease end a JetStream receipt carries.
func receiptDeadline(t *testing.T, r string) time.Time {
	t.Helper()
	parts := strings.SplitN(r, ":", 3)
	ms, err := strconv.ParseInt(parts[1], 10, 64)
	if len(parts) != 3 || err != nil {
		t.Fatalf("receipt %q: no deadline", r)
	}
	return time.UnixMilli(ms)
}

// wantStale checks that acking receipt r through q is refused as stale and
// deleted nothing: the queue still holds its message.
func wantStale(t *testing.T, what string, q *queue.Queue, r string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := q.Ack(ctx, r); !errors.Is(err, queue.ErrStaleReceipt) {
		t.Fatalf("%s: ack of R1's receipt: %v; want ErrStaleReceipt", what, err)
	}
	if st, err := q.Stats(ctx); err != nil || st.Total != 1 {
		t.Fatalf("%s: after the refused ack: %+v, %v; want the message still stored", what, st, err)
	}
}

func TestStaleReceiptAcrossRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a JetStream server process")
	}
	s := &staleServer{t: t, dir: t.TempDir(), port: freePort(t)}
	s.start()
	t.Cleanup(s.kill)
	url := fmt.Sprintf("nats://127.0.0.1:%d", s.port)
	dial := func() *nats.Conn {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
			nats.RetryOnFailedConnect(true), nats.Timeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	open := func(nc *nats.Conn) *queue.Queue {
		t.Helper()
		var q *queue.Queue
		var err error
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			q, err = queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: nc}, "stale", queue.WithDefaultVisibility(staleLease))
			cancel()
			if err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		return q
	}
	r1q, r2q := open(dial()), open(dial())
	trials := staleTrialCount(t)
	var liveAtAck, atOnce int
	var early []time.Duration
	for trial := range trials {
		ctx := context.Background()
		data := "m" + strconv.Itoa(trial)
		if err := r1q.Send(ctx, queue.Text(data)); err != nil {
			t.Fatalf("trial %d: send: %v", trial, err)
		}
		m1, err := r1q.Receive(ctx, 1)
		if err != nil || len(m1) != 1 || m1[0].Payload.Data != data {
			t.Fatalf("trial %d: R1 receive: %v, %v", trial, m1, err)
		}
		r1 := m1[0].ReceiptHandle
		deadline := receiptDeadline(t, r1)
		if trial%2 == 1 {
			// Hold the message a while first: the server then has
			// written the delivery to its consumer state, restores it
			// after the restart and redelivers when the restored lease
			// ends, instead of at once.
			time.Sleep(staleHold)
		}
		s.kill()
		s.start()
		// Right after the restart: the receipt is of the last life.
		wantStale(t, fmt.Sprintf("trial %d, after the restart, R1's handle", trial), r1q, r1)

		// R2 gets the message again: at once if the restarted server lost
		// the delivery, else when the restored lease ends.
		rctx, cancel := context.WithTimeout(ctx, staleLease+20*time.Second)
		m2, err := r2q.ReceiveWait(rctx, 1, staleLease+15*time.Second)
		cancel()
		if err != nil || len(m2) != 1 || m2[0].Payload.Data != data {
			t.Fatalf("trial %d: R2 receive: %v, %v; want %q again", trial, m2, err, data)
		}
		got := time.Now()
		early = append(early, deadline.Sub(got))
		if m2[0].Attempt == 1 {
			atOnce++
		}
		if got.Before(deadline.Add(-250 * time.Millisecond)) {
			liveAtAck++ // by its lease alone R1's receipt would still act
		}
		// After the redelivery, by R1's handle and by one opened now.
		wantStale(t, fmt.Sprintf("trial %d, after the redelivery, R1's handle", trial), r1q, r1)
		fresh := open(dial())
		wantStale(t, fmt.Sprintf("trial %d, after the redelivery, a new handle", trial), fresh, r1)
		fresh.Close()

		// R2's receipt acks, once.
		if err := r2q.Ack(ctx, m2[0].ReceiptHandle); err != nil {
			t.Fatalf("trial %d: R2's ack: %v", trial, err)
		}
		if st, err := r2q.Stats(ctx); err != nil || st.Total != 0 {
			t.Fatalf("trial %d: after R2's ack: %+v, %v; want the queue empty", trial, st, err)
		}
	}
	t.Logf("%d trials: R1's receipt refused after every restart and redelivery; redelivered before R1's lease ended (less the 250 ms margin) in %d, as attempt 1 (delivery lost) in %d; redelivery this long before R1's lease end: %v",
		trials, liveAtAck, atOnce, early)
}

// staleClusterLease is the cluster queue's AckWait and R1's lease.
const staleClusterLease = 3 * time.Second

// TestStaleReceiptAcrossLeaderChange: on an R3 queue of the 3-node
// cluster, R1 holds a message while the consumer's leader steps down; R1's
// receipt is refused right after the new leader is elected and again after
// the message was delivered to R2 (by R1's handle and by a handle opened
// on a new connection); R2's receipt acks, once. LOCALCLOUD_STALE_TRIALS
// sets the number of trials.
func TestStaleReceiptAcrossLeaderChange(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster")
	}
	name := freshName("stalecl")
	stream := "LCQ_" + name
	open := func(nc *nats.Conn) *queue.Queue {
		t.Helper()
		q := retryOpen(t, func() (*queue.Queue, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: nc, Replicas: 3}, name, queue.WithDefaultVisibility(staleClusterLease))
		})
		t.Cleanup(func() { q.Close() })
		return q
	}
	nc1 := connectCluster(t)
	r1q, r2q := open(nc1), open(connectCluster(t))
	js, err := jetstream.New(nc1)
	if err != nil {
		t.Fatal(err)
	}
	// leader reads the consumer's leader and its election time.
	leader := func() (string, time.Time) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		cons, err := js.Consumer(ctx, stream, "lc")
		if err != nil {
			return "", time.Time{}
		}
		ci, err := cons.Info(ctx)
		if err != nil || ci.Cluster == nil || ci.Cluster.Leader == "" || ci.Cluster.LeaderSince == nil {
			return "", time.Time{}
		}
		return ci.Cluster.Leader, *ci.Cluster.LeaderSince
	}
	// The window that remains: between a new leader's election and a
	// handle hearing of it (the advisory it subscribes to), an old
	// receipt passes the check. Measured here on a subscription like the
	// handle's: the advisory's arrival less the election time the new
	// leader reports (one host, one clock).
	advisories := make(chan time.Time, 16)
	asub, err := nc1.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED."+stream+".lc", func(*nats.Msg) { advisories <- time.Now() })
	if err != nil {
		t.Fatal(err)
	}
	defer asub.Unsubscribe()
	var lags []time.Duration
	trials := staleTrialCount(t)
	var early []time.Duration
	for trial := range trials {
		ctx := context.Background()
		data := "m" + strconv.Itoa(trial)
		if err := r1q.Send(ctx, queue.Text(data)); err != nil {
			t.Fatalf("trial %d: send: %v", trial, err)
		}
		m1, err := r1q.Receive(ctx, 1)
		if err != nil || len(m1) != 1 || m1[0].Payload.Data != data {
			t.Fatalf("trial %d: R1 receive: %v, %v", trial, m1, err)
		}
		r1 := m1[0].ReceiptHandle
		deadline := receiptDeadline(t, r1)
		for len(advisories) > 0 {
			<-advisories
		}

		was, since := leader()
		var stepped time.Time
		for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("trial %d: the consumer's leader %s (since %v) did not change after a step-down", trial, was, since)
			}
			if now, s := leader(); now != "" && (now != was || !s.Equal(since)) {
				// The advisory of this election: the first one that
				// arrived after it.
				for wait := time.After(5 * time.Second); ; {
					select {
					case at := <-advisories:
						if !at.Before(s) {
							lags = append(lags, at.Sub(s))
							break
						}
						continue
					case <-wait:
						t.Logf("trial %d: no leader-elected advisory within 5 s", trial)
					}
					break
				}
				break
			}
			if time.Since(stepped) > 3*time.Second {
				_, _ = nc1.Request("$JS.API.CONSUMER.LEADER.STEPDOWN."+stream+".lc", nil, 2*time.Second)
				stepped = time.Now()
			}
		}
		wantStale(t, fmt.Sprintf("trial %d, after the leader change, R1's handle", trial), r1q, r1)

		rctx, cancel := context.WithTimeout(ctx, staleClusterLease+20*time.Second)
		m2, err := r2q.ReceiveWait(rctx, 1, staleClusterLease+15*time.Second)
		cancel()
		if err != nil || len(m2) != 1 || m2[0].Payload.Data != data {
			t.Fatalf("trial %d: R2 receive: %v, %v; want %q again", trial, m2, err, data)
		}
		early = append(early, time.Until(deadline))
		wantStale(t, fmt.Sprintf("trial %d, after the redelivery, R1's handle", trial), r1q, r1)
		fresh := open(connectCluster(t))
		wantStale(t, fmt.Sprintf("trial %d, after the redelivery, a new handle", trial), fresh, r1)
		fresh.Close()

		if err := r2q.Ack(ctx, m2[0].ReceiptHandle); err != nil {
			t.Fatalf("trial %d: R2's ack: %v", trial, err)
		}
		if st, err := r2q.Stats(ctx); err != nil || st.Total != 0 {
			t.Fatalf("trial %d: after R2's ack: %+v, %v; want the queue empty", trial, st, err)
		}
	}
	slices.Sort(lags)
	t.Logf("%d trials: R1's receipt refused after every leader change and redelivery; redelivery this long before R1's lease end: %v; "+
		"the leader-elected advisory arrived this long after the election (sorted): %v", trials, early, lags)
}
