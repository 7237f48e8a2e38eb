package supervisor

import (
	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/hintsrc"
	"github.com/localcloud/localcloud/notify"
)

// hints is up's side of the wake-up hints: one publisher on an in-process
// connection to the embedded NATS server, and one hint source that watches
// every served queue for foreign writers, leases that end and delayed
// messages coming due. Sends and nacks through localcloud's library hint on
// their own.
type hints struct {
	nc  *nats.Conn
	pub *notify.Publisher
	src *hintsrc.Source
}

// startHints starts the publisher and the source. A failure is logged and
// up serves without hints of its own: hints are lossy by contract and
// consumers poll, so they never stop a start.
func (s *Supervisor) startHints() *hints {
	nc, err := s.nats.Connect()
	if err != nil {
		s.log.Warn("no hints from up (consumers still poll; library senders still hint)", keyErr, err)
		return nil
	}
	pub := notify.NewPublisher(nc, notify.PublisherOptions{Logger: s.log})
	src, err := hintsrc.New(hintsrc.Options{Publisher: pub, Logger: s.log})
	if err != nil {
		pub.Close()
		nc.Close()
		s.log.Warn("no hints from up (consumers still poll; library senders still hint)", keyErr, err)
		return nil
	}
	return &hints{nc: nc, pub: pub, src: src}
}

// watchAll starts hints for the queues Start opened, after Start returned:
// hints are lossy by contract (consumers poll), so the ready line does not
// wait for them. Each watch takes a connection of the queue and reads it
// (data_version, due count, last id, next visible_at), and those few
// queries per queue made up to a fifth of the start of up on a loaded
// machine (issue 25). A message sent before a queue's watch begins is
// hinted by the watch's first look, which publishes the due ones.
func (s *Supervisor) watchAll() {
	defer s.wg.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.watching = true
	for _, b := range s.stack.Bindings {
		if x := s.stores[b.Name]; x != nil {
			s.watchLocked(x)
		}
	}
}

// watchLocked starts hints for x when it is a queue. A failure is logged:
// the queue is served, only without up's hints. Before watchAll ran it
// does nothing: watchAll watches every store served then.
func (s *Supervisor) watchLocked(x *store) {
	if !s.watching || s.hints == nil || x.handle().Queue() == nil {
		return
	}
	if t, err := engine.For(x.cfg); err != nil || !t.Traits().Hints { // the others wake consumers themselves
		return
	}
	subject := config.Subject(s.stack.Name, x.cfg.Name)
	if err := s.hints.src.Add(x.cfg.Name, subject, x.handle()); err != nil {
		s.log.Warn("no hints from up for this queue (consumers still poll)", keyBinding, x.cfg.Name, keyErr, err)
	}
}

// unwatchLocked stops hints for the binding called name, if any. It must
// run before the binding's handle closes: the source holds one of its
// connections.
func (s *Supervisor) unwatchLocked(name string) {
	if s.hints != nil {
		s.hints.src.Remove(name)
	}
}

// close stops the source, then publishes what is pending and closes the
// connection. Safe on nil.
func (h *hints) close() {
	if h == nil {
		return
	}
	h.src.Close()
	h.pub.Close()
	h.nc.Close()
}
