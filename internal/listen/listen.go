// Package listen opens up's HTTP listeners (the explorer, the SQS API) with
// one policy for a taken port: a port the stack file set is an error, a
// default one falls back to a free port of the same host, and the caller
// says so.
package listen

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// ErrAddrInUse is returned by TCP when the address is taken.
var ErrAddrInUse = errors.New("address already in use")

// TCP opens a listener on addr for what ("the explorer", "the SQS API",
// named in errors). When the port is taken and fallback is true (the stack
// file did not set one), it listens on a free port of the same host and
// reports that with fellBack; without fallback a taken port is an error
// matching ErrAddrInUse.
func TCP(what, addr string, fallback bool) (ln net.Listener, fellBack bool, err error) {
	ln, err = net.Listen("tcp", addr)
	if err == nil {
		return ln, false, nil
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil, false, fmt.Errorf("listen for %s on %s: %w", what, addr, err)
	}
	if !fallback {
		return nil, false, fmt.Errorf("listen for %s on %s: %w", what, addr, ErrAddrInUse)
	}
	host, _, _ := net.SplitHostPort(addr)
	ln, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, false, fmt.Errorf("listen for %s on a free port of %s: %w", what, host, err)
	}
	return ln, true, nil
}
