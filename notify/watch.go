package notify

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
)

// Watch subscribes to subject on the hint server at url and calls wake for the hints it
// receives, until stop is called or ctx is done.
//
// It never fails because the server is absent: the connection retries forever, every
// DefaultReconnectWait, and resumes (re-subscribing) when a server is back at url, including a
// new server after a restart. Because hints sent while disconnected are lost, wake is also
// called after every successful (re)connection.
//
// wake runs on one goroutine owned by Watch, never concurrently with itself. Hints that arrive
// while wake runs fold into one more call, so a slow wake sees one call per burst, not one per
// hint. wake must not call stop.
//
// With FollowRuntime, url may be "" and every (re)connection goes to the server the runtime file
// names then: a restarted `localcloud up` on a new port is followed.
//
// stop unsubscribes, closes the connection and waits for a running wake to return; it is safe to
// call more than once. err is non-nil only for a nil wake or an unusable url.
func Watch(ctx context.Context, url, token, subject string, wake func(), dial ...DialOption) (stop func(), err error) {
	if wake == nil {
		return nil, errors.New("watch hints: wake is nil")
	}
	kick := make(chan struct{}, 1)
	signal := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	onConnect := func(*nats.Conn) { signal() }
	u, o, err := dialOptions(url, token, dial,
		nats.ConnectHandler(onConnect),   // first connect after a failed start
		nats.ReconnectHandler(onConnect), // every reconnect
	)
	if err == nil && u == "" {
		err = errNoURL
	}
	if err != nil {
		return nil, fmt.Errorf("watch hints on %s: %w", url, err)
	}
	nc, err := nats.Connect(u, o...)
	if err != nil {
		return nil, fmt.Errorf("watch hints on %s: %w", url, err)
	}
	if _, err := nc.Subscribe(subject, func(*nats.Msg) { signal() }); err != nil {
		nc.Close()
		return nil, fmt.Errorf("watch hints on %s: subscribe %q: %w", url, subject, err)
	}

	done := make(chan struct{})
	exited := make(chan struct{})
	var once sync.Once
	shutdown := func() {
		once.Do(func() {
			close(done)
			nc.Close() // also drops the subscription
		})
	}
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				shutdown()
				return
			case <-kick:
				select {
				case <-done:
					return
				default:
				}
				wake()
			}
		}
	}()
	return func() {
		shutdown()
		<-exited
	}, nil
}
