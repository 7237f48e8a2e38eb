package jsengine

// Provisioning: QueueEngine opens a queue, creating or checking its
// stream and consumer; the stream check and the leader waits are shared
// with KVEngine.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// consumerName is the queue's one durable pull consumer.
const consumerName = "lc"

// defaultAckWait is the AckWait of a consumer created by a handle whose
// driver.Config has no Visibility (queue.DefaultVisibility).
const defaultAckWait = 30 * time.Second

// QueueEngine is the JetStream engine of the queue binding. Location is the queue
// name; the queue is the stream "LCQ_<name>" (work-queue retention) with
// subject "lcq.<name>" for due messages and "lcqs.<name>.<id>" for delayed
// sends (message schedules), and one durable pull consumer "lc" with
// explicit acks and no delivery limit.
type QueueEngine struct {
	// Conn is the connection to the JetStream server or cluster; the
	// engine never closes it.
	Conn *nats.Conn
	// Replicas is the stream's replica count; 0 means 1.
	Replicas int
}

// Open opens or creates the queue cfg.Location names.
func (e QueueEngine) Open(ctx context.Context, cfg driver.Config) (driver.Queue, error) {
	if e.Conn == nil {
		return nil, bindings.Errorf(bindings.CodeBindingSetupFailed, "jetstream queue: Conn must not be nil")
	}
	if !nameRE.MatchString(cfg.Location) {
		return nil, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"jetstream queue: location %q: must be 1..64 of A-Z a-z 0-9 _ -", cfg.Location)
	}
	js, err := jetstream.New(e.Conn)
	if err != nil {
		return nil, fmt.Errorf("open jetstream queue %q: %w", cfg.Location, err)
	}
	dl, err := e.openDeadLetters(ctx, js, cfg) // deadletter.go
	if err != nil {
		return nil, fmt.Errorf("open jetstream queue %q: %w", cfg.Location, err)
	}
	replicas := e.Replicas
	if replicas == 0 {
		replicas = 1
	}
	subject := "lcq." + cfg.Location
	want := jetstream.StreamConfig{
		Name:               "LCQ_" + cfg.Location,
		Subjects:           []string{subject, "lcqs." + cfg.Location + ".>", markerPrefix + cfg.Location},
		Retention:          jetstream.WorkQueuePolicy,
		Storage:            jetstream.FileStorage,
		Replicas:           replicas,
		AllowDirect:        replicas == 1, // AckBatch's reads (direct.go)
		AllowAtomicPublish: true,
		AllowMsgSchedules:  true,
		AllowMsgTTL:        true, // the dedup markers' (dedup.go)
	}
	if !cfg.ReadOnly {
		// The binding's dedup window (dedup.go), which also bounds how
		// long a move's msg-id keeps a retry out (deadletter.go).
		want.Duplicates = duplicatesWindow(cfg.DedupWindow)
	}
	st, err := provision(ctx, js, want, cfg.ReadOnly, checkQueueStream)
	if err != nil {
		return nil, fmt.Errorf("open jetstream queue %q: %w", cfg.Location, err)
	}
	ackWait := cfg.Visibility
	if ackWait <= 0 {
		ackWait = defaultAckWait
	}
	var cons jetstream.Consumer
	if cfg.ReadOnly {
		cons, err = st.Consumer(ctx, consumerName)
	} else {
		cons, err = openConsumer(ctx, st, jetstream.ConsumerConfig{
			Durable:       consumerName,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       ackWait,
			MaxDeliver:    -1,
			FilterSubject: subject,
			MaxAckPending: -1,
		})
	}
	if err != nil {
		return nil, fmt.Errorf("open jetstream queue %q: consumer %q: %w", cfg.Location, consumerName, err)
	}
	ackWait = cons.CachedInfo().Config.AckWait
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("open jetstream queue %q: %w", cfg.Location, err)
	}
	if !cfg.ReadOnly && info.Config.Replicas <= 1 && !info.Config.AllowDirect {
		// A stream of one replica made before AckBatch read with direct
		// gets (direct.go): turn them on, else its reads stay a get each.
		c := info.Config
		c.AllowDirect = true
		up, err := js.UpdateStream(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("open jetstream queue %q: turn on allow_direct: %w", cfg.Location, err)
		}
		info = up.CachedInfo()
	}
	if err := waitStreamLeader(ctx, st); err != nil {
		return nil, fmt.Errorf("open jetstream queue %q: %w", cfg.Location, err)
	}
	if err := waitLeader(ctx, "consumer", func() (*jetstream.ClusterInfo, error) {
		ci, err := cons.Info(ctx)
		if err != nil {
			return nil, err
		}
		return ci.Cluster, nil
	}); err != nil {
		return nil, fmt.Errorf("open jetstream queue %q: %w", cfg.Location, err)
	}
	q := &Queue{replicated: info.Config.Replicas > 1, ackWait: ackWait, nc: e.Conn, js: js, st: st, cons: cons, name: cfg.Location, subject: subject,
		stream: want.Name, dedupWindow: info.Config.Duplicates, notifier: cfg.Notifier, dl: dl, readOnly: cfg.ReadOnly,
		url: e.Conn.ConnectedUrlRedacted(), ident: serverIdentity(e.Conn), done: make(chan struct{}), wake: make(chan struct{}),
		dead: map[string]time.Time{}, extended: map[string]time.Time{}, nacked: map[uint64]time.Time{}}
	q.direct.on.Store(info.Config.AllowDirect && info.Config.Replicas <= 1)
	if err := q.watchIncarnation(); err != nil { // incarnation.go
		return nil, fmt.Errorf("open jetstream queue %q: %w", cfg.Location, err)
	}
	return q, nil
}

// openConsumer creates the queue's consumer with want, or brings an
// existing one to want except for its AckWait, which it keeps: the server
// measures every pending delivery's lease end from the current AckWait
// (a Nak with a delay stores "now + delay - AckWait"), so changing it would
// move the lease ends of receipts already handed out. A handle whose
// default lease differs from the consumer's AckWait sets its leases with a
// Nak (see pull).
func openConsumer(ctx context.Context, st jetstream.Stream, want jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	cons, err := st.Consumer(ctx, want.Durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		cons, err = st.CreateConsumer(ctx, want)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			return openConsumer(ctx, st, want) // created meanwhile, with another AckWait
		}
		return cons, err
	case err != nil:
		return nil, err
	}
	want.AckWait = cons.CachedInfo().Config.AckWait
	return st.CreateOrUpdateConsumer(ctx, want)
}

// checkQueueStream fails closed on an existing stream whose settings
// contradict the queue's.
func checkQueueStream(have, want jetstream.StreamConfig) error {
	switch {
	case strings.Join(have.Subjects, ",") != strings.Join(want.Subjects, ","):
		return fmt.Errorf("subjects are %q, want %q", have.Subjects, want.Subjects)
	case have.Retention != jetstream.WorkQueuePolicy:
		return fmt.Errorf("retention is %s, want workqueue", have.Retention)
	case !have.AllowAtomicPublish:
		return errors.New("allow_atomic is off, want on")
	case !have.AllowMsgSchedules:
		return errors.New("allow_msg_schedules is off, want on")
	case !have.AllowMsgTTL:
		return errors.New("allow_msg_ttl is off, want on")
	case want.Duplicates != 0 && have.Duplicates != want.Duplicates:
		return fmt.Errorf("duplicate_window is %s, want %s (the binding's dedupWindow)", have.Duplicates, want.Duplicates)
	}
	return nil
}

// provision creates the stream want, or checks an existing one with check;
// readOnly only looks.
func provision(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, readOnly bool,
	check func(have, want jetstream.StreamConfig) error) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, want.Name)
	if err == nil {
		info, err := st.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("read stream %q: %w", want.Name, err)
		}
		if err := check(info.Config, want); err != nil {
			return nil, bindings.Errorf(bindings.CodeBindingSetupFailed,
				"stream %q exists with other settings: %v", want.Name, err)
		}
		return st, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("look up stream %q: %w", want.Name, err)
	}
	if readOnly {
		return nil, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"stream %q does not exist (read-only open creates nothing)", want.Name)
	}
	st, err = js.CreateStream(ctx, want)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return provision(ctx, js, want, readOnly, check) // created meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("create stream %q: %w", want.Name, err)
	}
	return st, nil
}

// leaderWait bounds how long Open waits for a new stream's or consumer's
// leader on a cluster.
const leaderWait = 10 * time.Second

// waitStreamLeader waits until a replicated stream has a leader, so that
// the first write after Open does not wait for the election (a put's expiry
// is stamped before it is published).
func waitStreamLeader(ctx context.Context, st jetstream.Stream) error {
	return waitLeader(ctx, "stream", func() (*jetstream.ClusterInfo, error) {
		info, err := st.Info(ctx)
		if err != nil {
			return nil, err
		}
		return info.Cluster, nil
	})
}

func waitLeader(ctx context.Context, what string, cluster func() (*jetstream.ClusterInfo, error)) error {
	deadline := time.Now().Add(leaderWait)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		ci, err := cluster()
		if err == nil && (ci == nil || ci.Leader != "") {
			return nil // a single server reports no cluster
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("no leader elected")
			}
			return fmt.Errorf("wait for the %s leader: %s: %w", what, leaderWait, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}
