package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
)

// ErrNeedsRestart is wrapped by the error of a reload whose change cannot be
// applied while up runs.
var ErrNeedsRestart = errors.New("change needs a restart of localcloud up")

// Diff is what a reload changed, by binding name, each list sorted.
type Diff struct {
	Added   []string // opened
	Removed []string // closed; their files stay
	// Reopened had their type, path or durability changed, or (a queue)
	// where its messages move: its dead-letter policy, or the queues that
	// dead-letter into it (a redrive's targets). The old handle was closed
	// and a new one opened.
	Reopened []string
	// Updated had only settings changed that the open handle does not use
	// (the visibility timeout, which every receive of up's gives): the
	// handle was kept.
	Updated []string
	// Renamed is set when the stack's name changed (and with it the hint
	// subjects).
	Renamed bool
}

// Empty reports whether nothing changed.
func (d Diff) Empty() bool {
	return len(d.Added)+len(d.Removed)+len(d.Reopened)+len(d.Updated) == 0 && !d.Renamed
}

// Reload re-reads the stack file and applies it as a diff (see the package
// doc). reason says what triggered it, for the log. A file that cannot be
// read or has mistakes, or a change that cannot be applied, is logged
// problem by problem, recorded in runtime.json, and returned; the last good
// stack keeps being served.
//
// The file is read and parsed before s.mu is taken, and the stores it adds
// are opened without it too: no file read ever runs while the lock that
// health checks and Close need is held. Reloads are serialised by reloadMu
// instead, so they apply in the order they read.
func (s *Supervisor) Reload(ctx context.Context, reason string) (Diff, error) {
	if s.stackFile == "" {
		return Diff{}, errors.New("reload: the stack was not read from a file")
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.isClosed() {
		return Diff{}, errors.New("reload: supervisor closed")
	}
	st, err := config.Load(s.stackFile, s.opts.LoadOptions...)
	if err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return Diff{}, errors.New("reload: supervisor closed")
		}
		s.reloadFailedLocked(err)
		return Diff{}, err
	}
	return s.apply(ctx, st, reason)
}

// Apply applies an already loaded stack, like Reload does after reading the
// file.
func (s *Supervisor) Apply(ctx context.Context, st *config.Stack) (Diff, error) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.isClosed() {
		return Diff{}, errors.New("apply stack: supervisor closed")
	}
	return s.apply(ctx, st, "apply")
}

func (s *Supervisor) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// apply plans the change under s.mu, opens the stores it needs without
// s.mu, and commits under s.mu only when every open worked, so a failed
// reload leaves the old stack fully served. The caller holds reloadMu: the
// set of stores cannot change in between, except by Close, which apply
// checks for before committing.
func (s *Supervisor) apply(ctx context.Context, st *config.Stack, reason string) (Diff, error) {
	s.mu.Lock()
	d, toOpen, err := s.planLocked(st)
	s.mu.Unlock()
	var opened []*store
	if err == nil {
		// reloadMu is held: no other open reads the env's stack meanwhile.
		prev := s.env.Stack
		s.env.Stack = st
		opened, err = openAll(ctx, s.env, toOpen, func() error { return nil })
		if err != nil {
			s.env.Stack = prev
		} else if len(opened) > 0 {
			s.syncJetStreamDirs(st.DataDir)
		}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		closeAll(opened, s.log)
		return Diff{}, errors.New("reload: supervisor closed")
	}
	if err != nil {
		s.reloadFailedLocked(err)
		s.mu.Unlock()
		return Diff{}, err
	}
	retired := s.commitLocked(st, d, opened)
	s.logDiff(d, reason)
	s.mu.Unlock()
	// Out of s.mu too: closing a store checkpoints its file. The retired
	// stores are no longer in s.stores, so nothing else reaches them; one
	// that a caller of KV still uses closes at its release.
	for _, x := range retired {
		x.retire(s.idle, s.log)
	}
	return d, nil
}

func (s *Supervisor) logDiff(d Diff, reason string) {
	if d.Empty() {
		s.log.Info("stack reloaded; nothing changed", "reason", reason)
		return
	}
	s.log.Info("stack reloaded", "reason", reason,
		"added", strings.Join(d.Added, ","), "removed", strings.Join(d.Removed, ","),
		"reopened", strings.Join(d.Reopened, ","), "updated", strings.Join(d.Updated, ","),
		"stack", s.stack.Name, "bindings", len(s.stores))
	for _, n := range d.Removed {
		s.log.Info("binding no longer served; its files were kept", keyBinding, n)
	}
}

// reloadFailedLocked logs every problem of err and records it in
// runtime.json.
func (s *Supervisor) reloadFailedLocked(err error) {
	// runtime.json first: whoever sees the log line finds it updated.
	s.reloadErr = err.Error()
	_ = s.writeRuntimeLocked()
	var ce *config.Errors
	if errors.As(err, &ce) {
		s.log.Error("stack file has mistakes; keeping the last good stack", keyFile, s.stackFile, "problems", len(ce.Problems))
		for _, p := range ce.Problems {
			s.log.Error("stack file problem", keyProblem, p.String())
		}
	} else {
		s.log.Error("cannot apply the stack file; keeping the last good stack", keyFile, s.stackFile, keyErr, err)
	}
}

// sameSettings compares two bindings of one name, ignoring their line.
func sameSettings(a, b config.Binding) bool {
	a.Line, b.Line = 0, 0
	return a == b
}

// needsReopen reports whether going from a to b needs a new handle.
func needsReopen(a, b config.Binding) bool {
	return a.Type != b.Type || a.Engine != b.Engine || a.Path != b.Path || a.Durability != b.Durability || a.Replicas != b.Replicas
}

// movesChanged reports whether queue a of stack old, b of st, moves its
// messages elsewhere: up's handle is opened with its dead-letter queue and
// its redrive targets (engine.QueueOptions), so a queue created through
// the SQS API with a RedrivePolicy changes its dead-letter queue's handle.
func movesChanged(old, st *config.Stack, a, b config.Binding) bool {
	dlA, originsA := engine.MoveTargets(old, a)
	dlB, originsB := engine.MoveTargets(st, b)
	return dlA != dlB || a.MaxAttempts != b.MaxAttempts || !slices.Equal(originsA, originsB)
}

// planLocked compares st with the stack being served: what changes, and
// the bindings whose stores must be opened.
func (s *Supervisor) planLocked(st *config.Stack) (Diff, []config.Binding, error) {
	var d Diff
	if st.DataDir != s.dataDir {
		return d, nil, fmt.Errorf("dataDir changed from %s to %s: %w", s.dataDir, st.DataDir, ErrNeedsRestart)
	}
	old := s.stack
	if !st.JetStream.Equal(old.JetStream) {
		return d, nil, fmt.Errorf("the jetstream section changed: %w", ErrNeedsRestart)
	}
	if on, sync := embeddedJetStream(st); on && !s.jsOn {
		return d, nil, fmt.Errorf("the stack now has jetstream bindings but up's embedded server was started without JetStream: %w", ErrNeedsRestart)
	} else if sync && !s.jsSync {
		return d, nil, fmt.Errorf("a jetstream binding now asks for durability full, but up's embedded server was started with lazy sync: %w", ErrNeedsRestart)
	}
	s.warnDurability(st)
	if st.Notify != old.Notify {
		s.log.Warn("notify settings changed; they apply after a restart of localcloud up", "url", s.nats.URL())
	}
	if st.Explorer != old.Explorer {
		s.log.Warn("explorer settings changed; they apply after a restart of localcloud up", "url", s.opts.ExplorerURL)
	}
	if st.SQS != old.SQS {
		s.log.Warn("sqs settings changed (or whether the stack has a queue binding); they apply after a restart of localcloud up", "endpoint", s.opts.SQSEndpoint)
	}
	var toOpen []config.Binding
	for _, b := range st.Bindings {
		cur, ok := s.stores[b.Name]
		switch {
		case !ok:
			d.Added = append(d.Added, b.Name)
			toOpen = append(toOpen, b)
		case b.Type == config.TypeQueue && movesChanged(old, st, cur.cfg, b):
			d.Reopened = append(d.Reopened, b.Name)
			toOpen = append(toOpen, b)
		case sameSettings(cur.cfg, b):
		case needsReopen(cur.cfg, b):
			d.Reopened = append(d.Reopened, b.Name)
			toOpen = append(toOpen, b)
		default:
			d.Updated = append(d.Updated, b.Name)
		}
	}
	for name := range s.stores {
		if _, ok := st.Binding(name); !ok {
			d.Removed = append(d.Removed, name)
		}
	}
	slices.Sort(d.Removed)
	d.Renamed = st.Name != old.Name
	return d, toOpen, nil
}

// commitLocked switches to st: takes the opened stores, drops the removed
// and replaced ones (their hints stopped) and records the new stack. It
// returns the dropped stores for the caller to close once s.mu is released.
func (s *Supervisor) commitLocked(st *config.Stack, d Diff, opened []*store) (retired []*store) {
	// Hints stop before a handle closes (the source holds one of its
	// connections). A new stack name changes every subject.
	if d.Renamed {
		for n := range s.stores {
			s.unwatchLocked(n)
		}
	}
	for _, n := range d.Removed {
		s.unwatchLocked(n)
		retired = append(retired, s.stores[n])
		delete(s.stores, n)
	}
	for _, x := range opened {
		if cur, ok := s.stores[x.cfg.Name]; ok {
			s.unwatchLocked(x.cfg.Name)
			retired = append(retired, cur)
		}
		s.stores[x.cfg.Name] = x
	}
	for _, n := range d.Updated {
		b, _ := st.Binding(n)
		s.stores[n].cfg = *b
	}
	s.stack = st
	if d.Renamed {
		for _, x := range s.stores {
			s.watchLocked(x)
		}
	} else {
		for _, x := range opened {
			s.watchLocked(x)
		}
	}
	s.reloadErr = ""
	s.checkHealthLocked(false)
	_ = s.writeRuntimeLocked()
	return retired
}

// closeAll closes the handles of stores that nothing else reaches any more.
func closeAll(stores []*store, log *slog.Logger) {
	for _, x := range stores {
		x.close(log)
	}
}
