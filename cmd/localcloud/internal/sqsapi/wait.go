package sqsapi

import "sync"

// waker turns the hints of up's NATS server into wake-ups of the long
// polls of one binding: chanFor returns a channel that the next hint for
// the binding closes.
type waker struct {
	mu    sync.Mutex
	chans map[string]chan struct{}
}

func newWaker() *waker { return &waker{chans: map[string]chan struct{}{}} }

func (w *waker) chanFor(name string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := w.chans[name]
	if ch == nil {
		ch = make(chan struct{})
		w.chans[name] = ch
	}
	return ch
}

// fire wakes the waiters of binding name; a binding nobody waits on costs
// nothing.
func (w *waker) fire(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch := w.chans[name]; ch != nil {
		close(ch)
		delete(w.chans, name)
	}
}
