package hintserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

const (
	// DefaultListen is the hint server's listen address when ServerOptions.Listen is empty:
	// loopback, on a free port chosen by the kernel.
	DefaultListen = "127.0.0.1:0"

	// DefaultReadyTimeout is how long StartServer waits for the server to accept clients.
	DefaultReadyTimeout = 5 * time.Second

	// logKeyComponent is the slog attribute that marks lines logged by the embedded server.
	logKeyComponent = "component"
)

// ServerOptions configures StartServer.
type ServerOptions struct {
	// Listen is host:port. Port 0 means a free port chosen by the kernel (unlike NATS's own
	// configuration, where 0 means 4222); an empty host means 127.0.0.1. Defaults to
	// DefaultListen.
	Listen string

	// Token, when not empty, is required from every client (nats.Token).
	Token string

	// Logger receives the server's log lines at matching levels, tagged component=nats.
	// Defaults to discarding them.
	Logger *slog.Logger

	// ReadyTimeout bounds the wait for the server to accept clients. Defaults to
	// DefaultReadyTimeout.
	ReadyTimeout time.Duration

	// JetStreamDir, when not empty, turns JetStream on with its store in this folder (the
	// stack's jetstream bindings); "" keeps JetStream off.
	JetStreamDir string

	// SyncAlways makes JetStream's file store fsync every write (sync_interval: always);
	// false keeps the server's default, a sync every 2 minutes.
	SyncAlways bool
}

// Server is an embedded NATS server that carries hints. Create it with StartServer.
type Server struct {
	ns    *server.Server
	url   string
	token string
	once  sync.Once
}

// StartServer starts an embedded NATS server and waits until it accepts clients. ctx bounds only
// the start; the server runs until Shutdown.
//
// A listen address already in use is reported at once as an error wrapping ErrAddrInUse that
// names the address and suggests a free port; the process is never exited.
func StartServer(ctx context.Context, opts ServerOptions) (*Server, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start hint server: %w", err)
	}
	host, port, err := parseListen(opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("start hint server: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if ip := net.ParseIP(host); (ip != nil && !ip.IsLoopback()) || (ip == nil && host != "localhost") {
		log.Warn("hint server listens beyond loopback", "listen", net.JoinHostPort(host, strconv.Itoa(port)))
	}
	// Check the port first: the server's own failure is also caught below, but this gives the
	// same clear error without starting anything in the common case.
	if port != 0 {
		addr := net.JoinHostPort(host, strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, listenError(addr, err)
		}
		if err := l.Close(); err != nil {
			return nil, fmt.Errorf("start hint server: release probe listener on %s: %w", addr, err)
		}
	}
	timeout := opts.ReadyTimeout
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	return startNATS(ctx, host, port, opts.Token, log, timeout, opts)
}

// startNATS starts the server without the port probe, so tests can reach the path where the
// server itself fails to listen.
func startNATS(ctx context.Context, host string, port int, token string, log *slog.Logger, timeout time.Duration, so ServerOptions) (*Server, error) {
	natsPort := port
	if natsPort == 0 {
		natsPort = server.RANDOM_PORT // -1; NATS reads 0 as its default port 4222
	}
	o := &server.Options{
		Host:          host,
		Port:          natsPort,
		NoSigs:        true, // otherwise SIGINT/SIGTERM call os.Exit
		NoLog:         true, // logs go through SetLoggerV2 below
		Authorization: token,
	}
	if so.JetStreamDir != "" {
		o.JetStream, o.StoreDir, o.SyncAlways = true, so.JetStreamDir, so.SyncAlways
	}
	ns, err := server.NewServer(o)
	if err != nil {
		return nil, fmt.Errorf("start hint server: configure: %w", err)
	}
	nl := &natsLogger{log: log.With(logKeyComponent, "nats")}
	ns.SetLoggerV2(nl, false, false, false)
	ns.Start() // returns once the client listener is set up or has failed

	addr := net.JoinHostPort(host, strconv.Itoa(port))
	fail := func(err error) (*Server, error) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		if msg := nl.fatalMessage(); msg != "" {
			if strings.Contains(msg, "address already in use") {
				return fail(listenError(addr, syscall.EADDRINUSE))
			}
			return fail(fmt.Errorf("start hint server on %s: %s", addr, msg))
		}
		if err := ctx.Err(); err != nil {
			return fail(fmt.Errorf("start hint server on %s: %w", addr, err))
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("start hint server on %s: %w after %s", addr, ErrNotReady, timeout))
		}
	}
	tcp, ok := ns.Addr().(*net.TCPAddr)
	if !ok {
		return fail(fmt.Errorf("start hint server on %s: %w: no TCP listener", addr, ErrNotReady))
	}
	s := &Server{
		ns:    ns,
		url:   "nats://" + net.JoinHostPort(host, strconv.Itoa(tcp.Port)),
		token: token,
	}
	if so.JetStreamDir != "" {
		// JetStream starts with the server; wait until it answers.
		for !ns.JetStreamEnabled() {
			if time.Now().After(deadline) {
				return fail(fmt.Errorf("start hint server on %s: JetStream in %s: %w after %s", addr, so.JetStreamDir, ErrNotReady, timeout))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	log.Info("hint server started", "url", s.url, "auth", token != "", "jetstream", so.JetStreamDir != "", "syncAlways", so.SyncAlways)
	return s, nil
}

// URL returns nats://host:port with the port actually bound.
func (s *Server) URL() string {
	if s == nil {
		return ""
	}
	return s.url
}

// Connect opens a client connection to the server through an in-process pipe instead of TCP
// (lower latency, no port). It passes the server's token; opts are applied after the defaults.
// Such a connection cannot outlive the server, so it suits a Publisher in the same process.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	o := []nats.Option{nats.InProcessServer(s.ns), nats.Name("localcloud-notify")}
	if s.token != "" {
		o = append(o, nats.Token(s.token))
	}
	nc, err := nats.Connect(s.url, append(o, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to hint server in process: %w", err)
	}
	return nc, nil
}

// Shutdown stops the server, disconnects its clients and waits until it is down. It is safe to
// call more than once, concurrently, and on a nil *Server.
func (s *Server) Shutdown() {
	if s == nil {
		return
	}
	s.once.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	})
}

// parseListen splits a listen address, applying the defaults documented on ServerOptions.Listen.
func parseListen(listen string) (string, int, error) {
	if listen == "" {
		listen = DefaultListen
	}
	host, p, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("%w %q: %v", ErrInvalidAddr, listen, err)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("%w %q: port must be a number from 0 to 65535", ErrInvalidAddr, listen)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return host, int(port), nil
}

// CheckListen reports whether StartServer could listen on listen now: it
// binds the address and closes it again at once. A taken address gives the
// error StartServer would (wrapping ErrAddrInUse); port 0 always passes.
// up calls it before it creates any store, so a taken port changes nothing.
// The address can of course be taken between the check and the start.
func CheckListen(listen string) error {
	host, port, err := parseListen(listen)
	if err != nil {
		return err
	}
	if port == 0 {
		return nil
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return listenError(addr, err)
	}
	return l.Close()
}

// listenError turns a failure to bind addr into the error StartServer reports.
func listenError(addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("start hint server: %s: %w (another localcloud or NATS server?); "+
			"to use a free port, set \"listen: 127.0.0.1:0\" under notify: in the stack file", addr, ErrAddrInUse)
	}
	return fmt.Errorf("start hint server: listen on %s: %w", addr, err)
}

// natsLogger adapts slog to the NATS server's Logger interface. Fatalf never exits: the server
// calls it when its listener fails, and StartServer turns the message into an error.
type natsLogger struct {
	log   *slog.Logger
	mu    sync.Mutex
	fatal string
}

func (l *natsLogger) fatalMessage() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatal
}

func (l *natsLogger) Noticef(format string, v ...any) { l.log.Info(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Tracef(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }

func (l *natsLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg)
	l.mu.Lock()
	if l.fatal == "" {
		l.fatal = msg
	}
	l.mu.Unlock()
}

// HasInterest reports whether a client subscription matches subject, for tests that wait for
// a subscriber to be in place before publishing.
func (s *Server) HasInterest(subject string) bool {
	return s.ns.GlobalAccount().SubscriptionInterest(subject)
}

// JetStream reports whether the server runs JetStream, and whether its file store syncs every
// write (ServerOptions.SyncAlways).
func (s *Server) JetStream() (enabled, syncAlways bool) {
	if s == nil {
		return false, false
	}
	return s.ns.JetStreamEnabled(), s.ns.JetStreamConfig() != nil && s.ns.JetStreamConfig().SyncAlways
}
