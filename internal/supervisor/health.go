package supervisor

import (
	"context"
	"time"
)

// HealthAdvice is what to do about a deleted or replaced store; up logs it
// with the problem, status prints it under the table.
const HealthAdvice = "localcloud up never recreates a deleted or replaced store: restore it, or remove the binding from the stack and restart up"

// CheckHealth checks every store and the owner lock now, logs what changed
// since the last check and updates runtime.json if anything did.
func (s *Supervisor) CheckHealth() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.checkHealthLocked(true)
}

// checkHealthLocked runs the checks (each store's engine.Handle.Health,
// which only stats files or reads the state the handle holds); with write
// it also rewrites runtime.json when a health changed (or when the last
// write failed).
//
// The log lines come after the write, so whoever sees one finds
// runtime.json updated.
func (s *Supervisor) checkHealthLocked(write bool) {
	var logs []func()
	for _, b := range s.stack.Bindings {
		x := s.stores[b.Name]
		if x == nil {
			continue
		}
		h := x.handle().Health()
		if h == x.health {
			continue
		}
		name, path := b.Name, b.Path
		if h == HealthOK {
			logs = append(logs, func() { s.log.Info("binding healthy again", keyBinding, name, keyPath, path) })
		} else {
			logs = append(logs, func() {
				s.log.Warn("binding unhealthy", keyBinding, name, keyPath, path, keyProblem, h, "advice", HealthAdvice)
			})
		}
		x.health = h
	}
	h := HealthOK
	if p := s.lock.check(); p != "" {
		h = p
	}
	if h != s.health {
		if h == HealthOK {
			logs = append(logs, func() { s.log.Info("owner lock file healthy again", keyPath, s.lock.path) })
		} else {
			logs = append(logs, func() { s.log.Warn("owner lock file lost", keyPath, s.lock.path, keyProblem, h) })
		}
		s.health = h
	}
	if write && (len(logs) > 0 || s.writeFailing) {
		_ = s.writeRuntimeLocked()
	}
	for _, l := range logs {
		l()
	}
}

func (s *Supervisor) healthLoop(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.CheckHealth()
		}
	}
}
