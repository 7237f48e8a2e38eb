package notify

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// A DialOption changes how Watch and DialPublisher reach the hint server.
type DialOption func(*dialConfig)

type dialConfig struct {
	runtimeFile string
}

// FollowRuntime makes the connection look the hint server up in
// runtimeFile, the runtime.json of `localcloud up` (`localcloud run` and
// `localcloud env` name it in LOCALCLOUD_RUNTIME_FILE), before every
// connection attempt: an up restarted on another port (a stack on port 0,
// or one whose default port was taken) is found again, and a stack on port
// 0 gets hints even when the app started before up. While the file is
// missing, unreadable or names no usable server, the URL given to Watch or
// DialPublisher is dialled; when that is "" too, the attempt fails and is
// retried every DefaultReconnectWait.
//
// The file is read as untrusted input (at most 64 KiB, natsUrl only), and
// its URL is used only when it is nats://host:port without credentials and
// its host is a loopback address or the host of the given URL: the
// connection carries the hint token, which must not go anywhere else.
func FollowRuntime(runtimeFile string) DialOption {
	return func(c *dialConfig) { c.runtimeFile = runtimeFile }
}

// placeholderURL stands for "the server runtime.json names" in nats.go's
// server pool when no URL was given; the dialer never dials it.
const placeholderURL = "nats://127.0.0.1:0"

// dialOptions are the connection options of DialPublisher and Watch for
// url, and the URL to hand nats.Connect.
func dialOptions(url, token string, opts []DialOption, extra ...nats.Option) (string, []nats.Option, error) {
	var c dialConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	o := []nats.Option{
		nats.Name("localcloud-notify"),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(DefaultReconnectWait),
		nats.ReconnectJitter(50*time.Millisecond, 50*time.Millisecond),
		nats.ReconnectBufSize(reconnectBufSize),
	}
	if token != "" {
		o = append(o, nats.Token(token))
	}
	if c.runtimeFile != "" {
		d, err := newFollowDialer(c.runtimeFile, url)
		if err != nil {
			return "", nil, err
		}
		// The dialer answers for the address; nats.go must neither
		// resolve the pool's host nor learn other servers from INFO.
		o = append(o, nats.SetCustomDialer(d), nats.SkipHostLookup(), nats.DontRandomize(), nats.IgnoreDiscoveredServers())
		if url == "" {
			url = placeholderURL
		}
	}
	return url, append(o, extra...), nil
}

// followDialer dials the hint server runtime.json names now, else the
// given URL's address.
type followDialer struct {
	file     string
	fallback string // host:port of the given URL; "" for none
	host     string // the given URL's host, also trusted in the file
	d        net.Dialer
}

func newFollowDialer(file, given string) (*followDialer, error) {
	f := &followDialer{file: file, d: net.Dialer{Timeout: 2 * time.Second}}
	if given != "" {
		u, err := url.Parse(given)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("hint server URL %q: want nats://host:port", given)
		}
		f.fallback, f.host = u.Host, u.Hostname()
	}
	return f, nil
}

// Dial ignores address (the pool's URL) for the server named now.
func (f *followDialer) Dial(network, _ string) (net.Conn, error) {
	addr, err := f.current()
	if err != nil {
		return nil, err
	}
	return f.d.Dial(network, addr)
}

func (f *followDialer) current() (string, error) {
	addr, ferr := RuntimeAddr(f.file, f.host)
	if ferr == nil {
		return addr, nil
	}
	if f.fallback != "" {
		return f.fallback, nil
	}
	return "", fmt.Errorf("no hint server known: %w", ferr)
}

// maxRuntimeFile bounds how much of runtime.json is read.
const maxRuntimeFile = 64 << 10

// RuntimeAddr returns host:port of the natsUrl in the runtime.json at
// file, if it is a usable hint server URL: nats://host:port, no user, and
// a loopback host or trustedHost ("" for none).
func RuntimeAddr(file, trustedHost string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var rt struct {
		NATSURL string `json:"natsUrl"`
	}
	if err := json.NewDecoder(io.LimitReader(f, maxRuntimeFile)).Decode(&rt); err != nil {
		return "", fmt.Errorf("read %s: %w", file, err)
	}
	u, err := url.Parse(rt.NATSURL)
	if err != nil || u.Scheme != "nats" || u.User != nil || u.Port() == "" || u.Port() == "0" {
		return "", fmt.Errorf("%s: natsUrl %q is not nats://host:port", file, truncate(rt.NATSURL))
	}
	h := u.Hostname()
	if a, err := netip.ParseAddr(h); (err != nil || !a.IsLoopback()) && !strings.EqualFold(h, "localhost") && !strings.EqualFold(h, trustedHost) {
		return "", fmt.Errorf("%s: natsUrl %q is neither on loopback nor on the given server's host %q", file, truncate(rt.NATSURL), trustedHost)
	}
	return u.Host, nil
}

func truncate(s string) string {
	if len(s) > 100 {
		return s[:100] + "..."
	}
	return s
}

var errNoURL = errors.New("no hint server URL and no runtime file to find one")
