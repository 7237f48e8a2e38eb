package e2e

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/testutil"
)

// The chaos test's settings from the environment:
//
//	LOCALCLOUD_CHAOS_DURATION=10m   chaos for 10 minutes instead of 60 s (10 s
//	                                with -short); give go test a -timeout that
//	                                leaves a few minutes on top
//	LOCALCLOUD_CHAOS_SEED=12345     replay the kill schedule of a run (the seed
//	                                is logged); the processes' own timing
//	                                still differs from run to run
const (
	envChaosDuration = "LOCALCLOUD_CHAOS_DURATION"
	envChaosSeed     = "LOCALCLOUD_CHAOS_SEED"
)

const (
	defaultChaos = 60 * time.Second
	shortChaos   = 10 * time.Second
	// chaosLease is the queues' visibilityTimeout: short, so a lease that a
	// killed consumer leaves comes back soon.
	chaosLease = 2 * time.Second
	// drainTimeout bounds the wait for the queues to empty after the chaos.
	drainTimeout = 2 * time.Minute
)

// Apps of the chaos test: 3 producers, 3 consumers, on 2 queues.
const (
	chaosProducers = 3
	chaosConsumers = 3
	producerPause  = 10 * time.Millisecond
	consumerWork   = 3 * time.Millisecond
)

var chaosQueues = []string{"jobs-a", "jobs-b"}

func chaosBindings() string {
	var b strings.Builder
	for _, q := range chaosQueues {
		fmt.Fprintf(&b, "  %s:\n    type: queue\n    visibilityTimeout: %s\n", q, chaosLease)
	}
	b.WriteString("  " + ledgerBinding + ":\n    type: kv\n")
	return b.String()
}

// member is one incarnation of a chaos app.
type member struct {
	kind   string // "p" producer, "c" consumer
	name   string // kind, slot and incarnation: c2.3 is consumer 2's third
	log    string
	p      *proc
	killed bool
}

// chaos is one chaos run: the stack, up, the apps and what was killed.
type chaos struct {
	t         *testing.T
	s         stack
	env       []string // the app environment (appEnvOf)
	logs      string   // directory of the apps' log files
	rng       *rand.Rand
	up        *proc
	producers []*member // the current incarnation of each slot
	consumers []*member
	all       []*member // every incarnation ever started
	starts    map[string]int
	kills     struct{ consumers, up, upStarting, producers int }
}

// TestChaos runs 3 producers and 3 consumers on 2 queues and a KV ledger
// while SIGKILLing consumers, up (also while it starts) and producers at
// random moments, restarting each. Then it drains the queues and checks
// from the apps' logs and the stores: every message sent was acked, nothing
// acked was delivered again, every redelivery followed a broken lease, the
// ledger holds exactly the acked messages, and every store is intact.
func TestChaos(t *testing.T) {
	t.Parallel()
	duration := defaultChaos
	if testing.Short() {
		duration = shortChaos
	}
	if v := os.Getenv(envChaosDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive Go duration such as 10m", envChaosDuration, v)
		}
		duration = d
	}
	seed := time.Now().UnixNano()
	if v := os.Getenv(envChaosSeed); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an integer", envChaosSeed, v)
		}
		seed = n
	}
	t.Logf("chaos for %s, seed %d (replay the schedule with %s=%d)", duration, seed, envChaosSeed, seed)

	c := &chaos{t: t, s: newStack(t, ""), logs: t.TempDir(), rng: rand.New(rand.NewPCG(uint64(seed), 0)), starts: map[string]int{}}
	// A fixed port, so the apps' NATS URL stays valid across restarts of up.
	c.movePort()
	c.startUp()
	for i := range chaosProducers {
		c.producers = append(c.producers, c.startMember("p", i))
	}
	for i := range chaosConsumers {
		c.consumers = append(c.consumers, c.startMember("c", i))
	}

	began := time.Now()
	for time.Since(began) < duration {
		c.checkAlive()
		c.pause(50*time.Millisecond, 800*time.Millisecond)
		switch x := c.rng.IntN(100); {
		case x < 55:
			i := c.rng.IntN(chaosConsumers)
			c.kill(c.consumers[i])
			c.kills.consumers++
			c.pause(0, 300*time.Millisecond)
			c.consumers[i] = c.startMember("c", i)
		case x < 75:
			c.killUp()
			// Without up the consumers wait on their fallback poll.
			c.pause(0, 1500*time.Millisecond)
			if c.rng.IntN(4) == 0 {
				c.killUpWhileStarting()
			}
			c.startUp()
		default:
			i := c.rng.IntN(chaosProducers)
			c.kill(c.producers[i])
			c.kills.producers++
			c.pause(0, 200*time.Millisecond)
			c.producers[i] = c.startMember("p", i)
		}
	}
	chaosTime := time.Since(began)
	c.checkAlive()

	// Drain: no more sends, then the consumers empty the queues (leases
	// of killed consumers end within chaosLease).
	drainBegan := time.Now()
	for _, m := range c.producers {
		terminate(t, m.p)
		exitOK(t, m.p, m.name)
	}
	c.producers = nil // stopped: checkAlive leaves them out
	testutil.CheckFor(t, drainTimeout, 200*time.Millisecond, "the queues to drain", func() bool {
		c.checkAlive()
		st := c.s.status(t)
		for _, q := range chaosQueues {
			b := st.binding(q)
			if b.Queue == nil || b.Queue.Due != 0 || b.Queue.InFlight != 0 {
				return false
			}
		}
		return true
	})
	drainTime := time.Since(drainBegan)
	for _, m := range c.consumers {
		terminate(t, m.p)
		exitOK(t, m.p, m.name)
	}
	c.up.signal(syscall.SIGTERM)
	if code := c.up.waitExit(stopLimit); code != 0 {
		t.Fatalf("up: exit %d after SIGTERM", code)
	}

	// The stores: intact, the queues empty, the ledger's keys.
	if code, stdout, stderr := runCLI(t, "check", "-f", c.s.file); code != 0 {
		t.Errorf("localcloud check: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, q := range chaosQueues {
		dir := filepath.Join(c.s.dataDir(), "queue", q)
		integrityOK(t, filepath.Join(dir, sqlitequeue.FileName))
		if left := queueRows(t, dir); len(left) != 0 {
			t.Errorf("%s still holds %d messages after the drain", q, len(left))
		}
	}
	ledgerDir := filepath.Join(c.s.dataDir(), "kv", ledgerBinding)
	integrityOK(t, filepath.Join(ledgerDir, sqlitekv.FileName))
	r := c.verify(kvRows(t, ledgerDir))

	t.Logf("chaos summary: %d messages sent (%d more whose producer was killed before logging them), %d acked, "+
		"%d redelivered, %d lost; kills: %d consumers, %d up (%d of them while it started), %d producers; "+
		"%s of chaos, drained in %s; seed %d",
		r.sent, r.unloggedSends, r.acked, r.redelivered, r.lost,
		c.kills.consumers, c.kills.up+c.kills.upStarting, c.kills.upStarting, c.kills.producers,
		chaosTime.Round(time.Millisecond), drainTime.Round(time.Millisecond), seed)
	t.Logf("chaos details: %d deliveries, %d redeliveries after a killed consumer, %d after a lease that ended under a live one "+
		"(%d stale acks, %d late acks of a message already acked); ledger puts that found the key: %d; "+
		"lost to kills before the log line: %d claims, %d acks",
		r.deliveries, r.brokenByKill, r.brokenLive, r.staleAcks, r.lateAcks, r.ledgerDuplicates, r.unloggedClaims, r.unloggedAcks)
	if len(r.violations) > 0 {
		shown := r.violations[:min(len(r.violations), 40)]
		t.Errorf("%d violations (seed %d):\n%s", len(r.violations), seed, strings.Join(shown, "\n"))
	}
	if r.sent == 0 || r.deliveries == 0 {
		t.Errorf("nothing happened: %d sent, %d delivered", r.sent, r.deliveries)
	}
}

// pause sleeps a random time in [lo, hi): the chaos schedule, not a wait
// for anything.
func (c *chaos) pause(lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(c.rng.Int64N(int64(hi-lo)+1)))
}

// movePort gives the stack a free fixed port and takes the app environment
// for it. Apps started before keep the old URL; they wait on their
// fallback poll instead of hints, which is still correct.
func (c *chaos) movePort() {
	c.t.Helper()
	listen := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(c.t))
	writeRaw(c.t, c.s.file, strings.Replace(stackText(chaosBindings()), "127.0.0.1:0", listen, 1))
	c.env = appEnvOf(c.t, c.s) // up is not running: the URL from notify.listen
}

// portTaken reports whether up failed because its fixed port is in use:
// the port is only reserved while an up listens on it.
func portTaken(p *proc) bool {
	return p.exitCode == 1 && strings.Contains(p.stderr(), "address already in use")
}

// startUp starts up and waits until it is ready, moving to another port if
// someone took the fixed one while up was down.
func (c *chaos) startUp() {
	c.t.Helper()
	for attempt := 1; ; attempt++ {
		p := start(c.t, "up", "-f", c.s.file)
		if waitReady(c.t, p, readyTimeout) {
			c.up = p
			return
		}
		if attempt < 3 && portTaken(p) {
			c.t.Logf("the port of up was taken while it was down; moving: %s", p.stderr())
			c.movePort()
			continue
		}
		c.t.Fatalf("up exited (code %d) instead of becoming ready:\n%s", p.exitCode, p.stderr())
	}
}

// killUp SIGKILLs the running up.
func (c *chaos) killUp() {
	c.t.Helper()
	if c.up.exited() {
		c.t.Fatalf("up exited by itself (code %d):\n%s", c.up.exitCode, c.up.stderr())
	}
	c.up.signal(syscall.SIGKILL)
	if code := c.up.waitExit(eventTimeout); code != 128+int(syscall.SIGKILL) {
		c.t.Fatalf("up: exit %d, want killed", code)
	}
	c.kills.up++
}

// killUpWhileStarting starts up and SIGKILLs it within its first 60 ms,
// most often before it is ready.
func (c *chaos) killUpWhileStarting() {
	c.t.Helper()
	p := start(c.t, "up", "-f", c.s.file)
	c.pause(0, 60*time.Millisecond)
	_ = syscall.Kill(p.pid(), syscall.SIGKILL) // it may have failed already: see below
	switch code := p.waitExit(eventTimeout); {
	case code == 128+int(syscall.SIGKILL):
		c.kills.upStarting++
	case portTaken(p):
		c.movePort()
	default:
		c.t.Fatalf("up started and killed: exit %d, want killed:\n%s", code, p.stderr())
	}
}

// startMember starts the next incarnation of producer or consumer slot i.
func (c *chaos) startMember(kind string, i int) *member {
	c.t.Helper()
	slot := kind + strconv.Itoa(i+1)
	c.starts[slot]++
	m := &member{kind: kind, name: slot + "." + strconv.Itoa(c.starts[slot])}
	m.log = filepath.Join(c.logs, m.name+".log")
	knobs := []string{envName + "=" + m.name, envLog + "=" + m.log, envQueues + "=" + strings.Join(chaosQueues, ",")}
	mode := "chaos-produce"
	if kind == "p" {
		knobs = append(knobs, envPause+"="+producerPause.String())
	} else {
		mode = "chaos-consume"
		knobs = append(knobs, envWork+"="+consumerWork.String())
	}
	m.p = startApp(c.t, c.env, mode, knobs...)
	c.all = append(c.all, m)
	return m
}

// kill SIGKILLs a running app.
func (c *chaos) kill(m *member) {
	c.t.Helper()
	if m.p.exited() {
		c.t.Fatalf("%s exited by itself (code %d):\n%s", m.name, m.p.exitCode, m.p.stderr())
	}
	m.killed = true
	m.p.signal(syscall.SIGKILL)
	if code := m.p.waitExit(eventTimeout); code != 128+int(syscall.SIGKILL) {
		c.t.Fatalf("%s: exit %d, want killed", m.name, code)
	}
}

// checkAlive fails the test if up or an app that was not killed has ended.
func (c *chaos) checkAlive() {
	c.t.Helper()
	for _, p := range append([]*member{{name: "up", p: c.up}}, append(c.producers, c.consumers...)...) {
		if p.p.exited() {
			c.t.Fatalf("%s exited by itself (code %d):\nstderr:\n%s", p.name, p.p.exitCode, p.p.stderr())
		}
	}
}

// waitReady waits for up's ready line. It returns false when up exits
// first and fails the test after timeout.
func waitReady(t *testing.T, p *proc, timeout time.Duration) bool {
	t.Helper()
	_, ok := p.awaitLine(0, timeout, "msg=ready")
	return ok
}

// delivery is one logged delivery of a message to a consumer.
type delivery struct {
	m       *member
	key     string // queue:id
	att     int64
	at      time.Time // when it was logged, after the claim
	outcome string    // "acked", "stale" (ack failed, stale receipt), "fail" (put or ack failed otherwise), or "" (none logged)
	// The ack's start and its return (acked only).
	ackStart, ackEnd time.Time
	// open: the last delivery of a killed consumer's queue with no outcome;
	// the kill came between the got line and the outcome.
	open bool
}

// chaosResult is what verify found.
type chaosResult struct {
	sent, unloggedSends, acked, redelivered, lost int
	deliveries, brokenByKill, brokenLive          int
	staleAcks, lateAcks, ledgerDuplicates         int
	unloggedClaims, unloggedAcks                  int
	violations                                    []string
}

func (r *chaosResult) violate(format string, args ...any) {
	r.violations = append(r.violations, fmt.Sprintf(format, args...))
}

// verify checks the apps' logs against each other and the ledger (key ->
// value). A SIGKILL can fall between a call's effect and its log line, so
// the logs miss at most one effect per killed app and queue, and only of
// the call it was in: a send of a producer (the id after its last logged
// one), a claim of a consumer whose last delivery of that queue was
// finished, or the ack of a consumer's open last delivery (then its put is
// in the ledger, the queue is empty and nothing redelivered it). Every
// other gap is a violation.
func (c *chaos) verify(ledger map[string]string) chaosResult {
	t := c.t
	var r chaosResult

	// Producers: what was sent; the one send a killed producer may not
	// have logged.
	sent := map[string]bool{}
	maybeSent := map[string]bool{}
	for _, m := range c.all {
		if m.kind != "p" {
			continue
		}
		last := 0
		for _, l := range readLog(t, m.log) {
			key := l.str("q") + ":" + l.str("id")
			if l.kind != "sent" || sent[key] {
				r.violate("%s: unexpected or repeated line %s %v", m.name, l.kind, l.fields)
				continue
			}
			sent[key] = true
			last++
			if want := m.name + "-" + strconv.Itoa(last); l.str("id") != want {
				r.violate("%s: sent %s, want %s next", m.name, l.str("id"), want)
			}
		}
		if m.killed {
			n := last + 1
			maybeSent[chaosQueues[n%len(chaosQueues)]+":"+m.name+"-"+strconv.Itoa(n)] = true
		}
	}
	r.sent = len(sent)

	// Consumers: deliveries by message; per killed consumer and queue,
	// whether its last delivery was open (else it may hide one claim).
	byKey := map[string][]*delivery{}
	cleanKills := map[string]int{} // queue -> killed consumers whose last delivery of it was finished
	for _, m := range c.all {
		if m.kind != "c" {
			continue
		}
		cur := map[string]*delivery{} // queue -> delivery in progress
		for _, l := range readLog(t, m.log) {
			q, key, att := l.str("q"), l.str("q")+":"+l.str("id"), l.num(t, "att")
			d := cur[q]
			if l.kind == "got" {
				if d != nil && d.outcome == "" {
					r.violate("%s: got %s attempt %d before finishing %s attempt %d", m.name, key, att, d.key, d.att)
				}
				d = &delivery{m: m, key: key, att: att, at: l.at(t, "t")}
				cur[q] = d
				byKey[key] = append(byKey[key], d)
				r.deliveries++
				continue
			}
			if d == nil || d.key != key || d.att != att || d.outcome != "" {
				r.violate("%s: %s %v does not follow its got line", m.name, l.kind, l.fields)
				continue
			}
			switch l.kind {
			case "put":
				if l.str("won") == "false" {
					r.ledgerDuplicates++
				}
			case "acked":
				d.outcome, d.ackStart, d.ackEnd = "acked", l.at(t, "t0"), l.at(t, "t")
			case "fail":
				if l.str("op") == "ack" && l.str("stale") == "true" {
					d.outcome = "stale"
					r.staleAcks++
				} else {
					d.outcome = "fail"
					r.violate("%s: %s of %s attempt %d failed: %s", m.name, l.str("op"), key, att, l.str("err"))
				}
			default:
				r.violate("%s: unknown line %s %v", m.name, l.kind, l.fields)
			}
		}
		for _, q := range chaosQueues {
			d := cur[q]
			switch {
			case d != nil && d.outcome == "" && m.killed:
				d.open = true
			case d != nil && d.outcome == "":
				r.violate("%s stopped cleanly but left %s attempt %d unfinished", m.name, d.key, d.att)
			case m.killed:
				cleanKills[q]++
			}
		}
	}

	// Each message: sent, delivered with attempts 1..M, the last acked,
	// every earlier one broken (killed or ended under a live consumer).
	keys := map[string]bool{}
	for k := range sent {
		keys[k] = true
	}
	for k := range byKey {
		keys[k] = true
	}
	acked := map[string]bool{}
	unloggedClaims := map[string]int{}
	for key := range keys {
		q, _, _ := strings.Cut(key, ":")
		if !sent[key] {
			if !maybeSent[key] {
				r.violate("%s was delivered but never sent", key)
			}
			r.unloggedSends++
		}
		ds := byKey[key]
		if len(ds) == 0 {
			r.violate("%s was sent but never delivered: lost", key)
			r.lost++
			continue
		}
		slices.SortFunc(ds, func(a, b *delivery) int { return cmp.Compare(a.att, b.att) })
		last := ds[len(ds)-1]
		if last.att > 1 {
			r.redelivered++
		}
		byAtt := map[int64]*delivery{}
		for _, d := range ds {
			if byAtt[d.att] != nil {
				r.violate("%s attempt %d was delivered twice: to %s and %s", key, d.att, byAtt[d.att].m.name, d.m.name)
			}
			byAtt[d.att] = d
		}
		for a := int64(1); a < last.att; a++ {
			d := byAtt[a]
			switch {
			case d == nil:
				unloggedClaims[q]++ // a killed consumer's claim, checked below
			case d.outcome == "acked":
				// The ack came after the lease ended: it succeeds as a
				// no-op only once the last attempt was acked, which
				// happened after that attempt's got line.
				r.lateAcks++
				r.brokenLive++
				if d.ackEnd.Before(last.at) || last.outcome == "acked" && d.ackEnd.Before(last.ackStart) {
					r.violate("%s: attempt %d acked by %s (ack returned %s), yet attempt %d was delivered to %s at %s (its ack began %s)",
						key, a, d.m.name, d.ackEnd.Format(time.StampMicro), last.att, last.m.name, last.at.Format(time.StampMicro), last.ackStart.Format(time.StampMicro))
				}
			case d.outcome == "stale" || d.outcome == "fail":
				r.brokenLive++
			case d.open:
				r.brokenByKill++
			default:
				r.violate("%s: attempt %d (to %s) was redelivered with no broken lease", key, a, d.m.name)
			}
		}
		switch {
		case last.outcome == "acked":
			acked[key] = true
		case last.open && ledger[key] != "":
			// Killed after its put, perhaps after its ack too; the queue
			// is empty, so the ack happened.
			acked[key] = true
			r.unloggedAcks++
		default:
			r.violate("%s: its last delivery, attempt %d to %s, was not acked (outcome %q, killed %v): lost", key, last.att, last.m.name, last.outcome, last.m.killed)
			r.lost++
		}
	}
	for _, q := range chaosQueues {
		r.unloggedClaims += unloggedClaims[q]
		if unloggedClaims[q] > cleanKills[q] {
			r.violate("%s: %d attempts were claimed but never logged, yet only %d killed consumers could have claimed one unlogged",
				q, unloggedClaims[q], cleanKills[q])
		}
	}
	r.acked = len(acked)

	// The ledger: exactly the acked messages.
	for key := range acked {
		if _, ok := ledger[key]; !ok {
			r.violate("%s was acked but is not in the ledger", key)
		}
	}
	for key := range ledger {
		if !acked[key] {
			r.violate("the ledger holds %s, which was never acked", key)
		}
	}
	return r
}
