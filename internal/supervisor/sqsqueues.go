package supervisor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
)

// ErrQueueExists, ErrNoCreatedQueue and ErrStackBinding are wrapped by the
// errors of CreateQueue and DeleteQueue a client can act on.
var (
	ErrQueueExists    = errors.New("queue exists")
	ErrNoCreatedQueue = errors.New("no queue of that name was created through the SQS API")
	ErrStackBinding   = errors.New("the name is a binding of the stack file")
	ErrNoSuchQueue    = errors.New("no queue of that name is served")
)

// CreateQueue adds q (with tags) to the queues the SQS API created (config.SQSStateFile
// under the dataDir) and reloads, so that it is served (and shown by every
// tool) when CreateQueue returns. A name the stack already has is
// ErrQueueExists (or ErrStackBinding for a KV binding); a failed reload
// leaves the file as it was.
func (s *Supervisor) CreateQueue(ctx context.Context, q config.CreatedQueue, tags map[string]string) error {
	if q.Binding == "" && !config.IsBindingName(q.Name) {
		q.Binding = config.DeriveBindingName(q.Name)
	}
	if err := q.Check(); err != nil {
		return err
	}
	if err := config.CheckSQSTags(tags); err != nil {
		return err
	}
	s.sqsMu.Lock()
	defer s.sqsMu.Unlock()
	stack := s.Stack()
	if _, ok := stack.SQSQueue(q.Name); ok {
		return fmt.Errorf("queue %s: %w", q.Name, ErrQueueExists)
	}
	bn := q.BindingName()
	if b, ok := stack.Binding(bn); ok {
		switch {
		case bn != q.Name && b.Created:
			return fmt.Errorf("queue %s: its binding name %s is taken by queue %s, created through the SQS API: %w", q.Name, bn, b.SQSName(), config.ErrBindingTaken)
		case bn != q.Name:
			return fmt.Errorf("queue %s: its binding name %s is taken by a %s binding of the stack file: %w", q.Name, bn, b.Type, config.ErrBindingTaken)
		case b.Type != config.TypeQueue:
			return fmt.Errorf("%s is a %s binding of the stack file: %w", q.Name, b.Type, ErrStackBinding)
		}
		return fmt.Errorf("queue %s: %w", q.Name, ErrQueueExists)
	}
	st, err := config.ReadSQSState(s.dataDir)
	if err != nil {
		return err
	}
	old := st
	if slices.ContainsFunc(st.Queues, func(c config.CreatedQueue) bool { return c.Name == q.Name }) {
		// In the file but shadowed or refused at load: never two entries.
		return fmt.Errorf("queue %s is in %s but not served (see up's log): %w", q.Name, config.SQSStatePath(s.dataDir), ErrQueueExists)
	}
	if i := slices.IndexFunc(st.Queues, func(c config.CreatedQueue) bool { return c.BindingName() == bn }); i >= 0 {
		return fmt.Errorf("queue %s: its binding name %s is taken by queue %s in %s (not served, see up's log): %w",
			q.Name, bn, st.Queues[i].Name, config.SQSStatePath(s.dataDir), config.ErrBindingTaken)
	}
	if len(st.Queues) >= config.MaxCreatedQueues {
		return fmt.Errorf("%w: at most %d queues are created through the SQS API, got %d already; delete some", config.ErrSQSLimit, config.MaxCreatedQueues, len(st.Queues))
	}
	st.Queues = append(slices.Clone(st.Queues), q)
	if len(tags) > 0 {
		st.Tags = maps.Clone(st.Tags)
		if st.Tags == nil {
			st.Tags = map[string]map[string]string{}
		}
		st.Tags[bn] = maps.Clone(tags)
	}
	return s.writeAndReload(ctx, old, st, "CreateQueue "+q.Name)
}

// UpdateQueue replaces the attributes of a queue the SQS API created
// (its engine, replicas and creation time stay) and reloads, so that they
// are served when it returns; a failed reload leaves the file as it was.
func (s *Supervisor) UpdateQueue(ctx context.Context, q config.CreatedQueue) error {
	s.sqsMu.Lock()
	defer s.sqsMu.Unlock()
	st, err := config.ReadSQSState(s.dataDir)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(st.Queues, func(c config.CreatedQueue) bool { return c.Name == q.Name })
	if i < 0 {
		return fmt.Errorf("queue %s: %w", q.Name, ErrNoCreatedQueue)
	}
	old := st
	st.Queues = slices.Clone(st.Queues)
	q.Engine, q.Replicas, q.Created, q.Binding = st.Queues[i].Engine, st.Queues[i].Replicas, st.Queues[i].Created, st.Queues[i].Binding
	if err := q.Check(); err != nil {
		return err
	}
	st.Queues[i] = q
	return s.writeAndReload(ctx, old, st, "SetQueueAttributes "+q.Name)
}

// DeleteQueue removes the queue the SQS API created with binding name
// name: from the state file,
// from what up serves, then its store. A binding of the stack file is never
// removed (ErrStackBinding); nor is a queue that another queue dead-letters
// into.
func (s *Supervisor) DeleteQueue(ctx context.Context, name string) error {
	s.sqsMu.Lock()
	defer s.sqsMu.Unlock()
	stack := s.Stack()
	b, ok := stack.Binding(name)
	if !ok {
		return fmt.Errorf("queue %s: %w", name, ErrNoSuchQueue)
	}
	if !b.Created {
		return fmt.Errorf("%s: %w", name, ErrStackBinding)
	}
	if o := stack.DeadLetterOrigins(name); len(o) > 0 {
		return fmt.Errorf("queue %s is the dead-letter queue of %s; delete that queue first", name, o[0].Name)
	}
	st, err := config.ReadSQSState(s.dataDir)
	if err != nil {
		return err
	}
	old := st
	st.Queues = slices.DeleteFunc(slices.Clone(st.Queues), func(q config.CreatedQueue) bool { return q.BindingName() == name })
	if len(st.Queues) == len(old.Queues) {
		return fmt.Errorf("queue %s: %w", name, ErrNoCreatedQueue)
	}
	st.Tags = maps.Clone(st.Tags)
	delete(st.Tags, name)
	if err := s.writeAndReload(ctx, old, st, "DeleteQueue "+name); err != nil {
		return err
	}
	t, err := engine.For(*b)
	if err == nil {
		err = t.Remove(ctx, s.env, *b)
	}
	if err != nil {
		s.log.Error("queue deleted through the SQS API but its store could not be removed", keyBinding, name, keyErr, err)
		return fmt.Errorf("queue %s is no longer served, but its store could not be removed: %w", name, err)
	}
	s.log.Info("queue deleted through the SQS API", keyBinding, name)
	return nil
}

// writeAndReload writes st and reloads; when the reload fails, old is
// written back.
func (s *Supervisor) writeAndReload(ctx context.Context, old, st config.SQSState, reason string) error {
	if err := config.WriteSQSState(s.dataDir, st); err != nil {
		return err
	}
	if _, err := s.Reload(ctx, reason); err != nil {
		if werr := config.WriteSQSState(s.dataDir, old); werr != nil {
			s.log.Error("cannot restore the SQS state file", keyFile, config.SQSStatePath(s.dataDir), keyErr, werr)
		}
		return fmt.Errorf("%s: %w", reason, err)
	}
	return nil
}

// QueueTags returns the SQS tags of the served queue with binding name name.
func (s *Supervisor) QueueTags(name string) (map[string]string, error) {
	if _, ok := s.Queue(name); !ok {
		return nil, fmt.Errorf("queue %s: %w", name, ErrNoSuchQueue)
	}
	st, err := config.ReadSQSState(s.dataDir)
	if err != nil {
		return nil, err
	}
	return maps.Clone(st.Tags[name]), nil
}

// TagQueue sets the tags set and removes the keys unset from the tags of
// the served queue with binding name name, in the state file. The result must hold within SQS's
// limits (config.CheckSQSTags).
func (s *Supervisor) TagQueue(name string, set map[string]string, unset []string) error {
	s.sqsMu.Lock()
	defer s.sqsMu.Unlock()
	if _, ok := s.Queue(name); !ok {
		return fmt.Errorf("queue %s: %w", name, ErrNoSuchQueue)
	}
	st, err := config.ReadSQSState(s.dataDir)
	if err != nil {
		return err
	}
	tags := maps.Clone(st.Tags[name])
	if tags == nil {
		tags = map[string]string{}
	}
	maps.Copy(tags, set)
	for _, k := range unset {
		delete(tags, k)
	}
	if err := config.CheckSQSTags(tags); err != nil {
		return fmt.Errorf("queue %s: %w", name, err)
	}
	st.Tags = maps.Clone(st.Tags)
	if st.Tags == nil {
		st.Tags = map[string]map[string]string{}
	}
	if len(tags) == 0 {
		delete(st.Tags, name)
	} else {
		st.Tags[name] = tags
	}
	return config.WriteSQSState(s.dataDir, st)
}
