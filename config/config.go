package config

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Version is the only stack file version this package reads.
const Version = 1

// Defaults applied to fields the stack file leaves out.
const (
	// DefaultStackFile is the stack file used when neither a flag nor
	// $LOCALCLOUD_STACK names one.
	DefaultStackFile = "stack.yaml"
	// AltStackFile is read instead of [DefaultStackFile] when only it
	// exists in the working directory.
	AltStackFile = "stack.yml"
	// DefaultDataDir is the folder, relative to the stack file's folder, that
	// holds one store directory per binding.
	DefaultDataDir = ".localcloud"
	// DefaultListenHost is the host of the embedded NATS server that
	// carries wake-up hints when the stack file sets no notify.listen. It
	// is loopback, so no token is needed. The port is the stack's own
	// stable default port, DefaultListen.
	DefaultListenHost = "127.0.0.1"
	// DefaultPortBase and DefaultPortCount bound the stable default NATS
	// ports: DefaultPortBase + (FNV-1a of the absolute dataDir mod
	// DefaultPortCount), below Linux's ephemeral range (32768-60999), so
	// an outgoing connection never holds it, and away from NATS's own
	// 4222, which a developer's NATS server may hold.
	DefaultPortBase  = 14222
	DefaultPortCount = 1000
	// DefaultExplorerListen is the address of the web explorer that up
	// serves. When the stack file sets no explorer.listen and this port is
	// taken, up picks a free port instead and says so.
	DefaultExplorerListen = "127.0.0.1:4280"
	// DefaultVisibilityTimeout is how long a received queue message stays
	// hidden from other receivers before it is delivered again.
	DefaultVisibilityTimeout = 30 * time.Second
	// DefaultDurability is the durability of a binding that does not set one.
	DefaultDurability = DurabilityNormal
	// DefaultRetryDelay, DefaultMaxRetryDelay and DefaultDedupWindow are a
	// queue's retryDelay, maxRetryDelay and dedupWindow when not set (the
	// queue package's defaults).
	DefaultRetryDelay    = time.Second
	DefaultMaxRetryDelay = 5 * time.Minute
	DefaultDedupWindow   = 5 * time.Minute
	// DefaultEngine is the engine of a binding that does not set one.
	DefaultEngine = EngineSQLite
	// DefaultReplicasEmbedded is a jetstream binding's replica count on
	// up's embedded server (one node); DefaultReplicasCluster with
	// jetstream.servers (a cluster of, usually, three nodes).
	DefaultReplicasEmbedded = 1
	DefaultReplicasCluster  = 3
)

// Limits checked by [Parse] and [Load].
const (
	// VisibilityTimeoutMin and VisibilityTimeoutMax bound a queue's
	// visibilityTimeout, as Amazon SQS does (its minimum is 0; here a zero
	// timeout would redeliver every message at once, so it is refused).
	VisibilityTimeoutMin = time.Second
	VisibilityTimeoutMax = 12 * time.Hour
	// MaxAttemptsMin and MaxAttemptsMax bound a queue's maxAttempts, as
	// Amazon SQS bounds maxReceiveCount.
	MaxAttemptsMin = 1
	MaxAttemptsMax = 1000
	// RetryDelayMax bounds retryDelay and maxRetryDelay (their minimum is
	// 0s: retry at once), the queue package's MaxDelay.
	RetryDelayMax = 12 * time.Hour
	// DedupWindowMin and DedupWindowMax bound dedupWindow.
	DedupWindowMin = time.Millisecond
	DedupWindowMax = 7 * 24 * time.Hour
	// ReplicasMin and ReplicasMax bound a jetstream binding's replicas
	// (JetStream's own limit is 5).
	ReplicasMin = 1
	ReplicasMax = 5
	// MaxNameLength is the longest stack or binding name. Names match
	// [a-z][a-z0-9-]{0,62}: they appear in NATS subjects and directory names.
	MaxNameLength = 63
	// MaxFileSize is the largest stack file read; anything bigger is refused
	// before it is parsed.
	MaxFileSize = 1 << 20
)

// Environment variables localcloud reads or sets.
const (
	// EnvStackFile names the stack file when no flag does; see [DefaultFile].
	EnvStackFile = "LOCALCLOUD_STACK"
	// EnvBindingPrefix starts the variable that tells a program where a
	// binding's store lives; see [EnvName].
	EnvBindingPrefix = "LOCALCLOUD_BINDING_"
)

// Type is the kind of a binding.
type Type string

// Binding types.
const (
	// TypeKV is a key-value store.
	TypeKV Type = "kv"
	// TypeQueue is a message queue with visibility timeouts and dead letters.
	TypeQueue Type = "queue"
)

// Durabilities a binding may ask for.
const (
	// DurabilityNormal survives a crash of the process; a power loss may lose
	// the last commits (SQLite synchronous=NORMAL in WAL mode).
	DurabilityNormal = "normal"
	// DurabilityFull also survives a power loss, at the disk's fsync rate
	// (SQLite synchronous=FULL).
	DurabilityFull = "full"
)

// Engines a binding may run on.
const (
	// EngineSQLite keeps the binding in a SQLite file of the localkv.v1 /
	// localqueue.v1 format under dataDir.
	EngineSQLite = "sqlite"
	// EngineJetStream keeps the binding in a NATS JetStream stream: on up's
	// embedded server, or on the cluster jetstream.servers names.
	EngineJetStream = "jetstream"
)

// Stack is a checked stack file with every default applied.
type Stack struct {
	// Version is the stack file version; always [Version].
	Version int
	// Name names the stack; it matches [a-z][a-z0-9-]{0,62}.
	Name string
	// File is the absolute path of the stack file; "" when [Parse] was given
	// no file name.
	File string
	// Dir is the absolute folder that a relative dataDir is resolved against:
	// the stack file's folder.
	Dir string
	// DataDir is the absolute, cleaned folder holding the stores. Defaults to
	// [DefaultDataDir] inside Dir.
	DataDir string
	// Notify configures the embedded NATS server.
	Notify Notify
	// Explorer configures the web explorer that up serves.
	Explorer Explorer
	// SQS configures the SQS-compatible API that up serves.
	SQS SQS
	// JetStream says where jetstream bindings live; its zero value means
	// up's embedded server.
	JetStream JetStream
	// Bindings lists the bindings sorted by name.
	Bindings []Binding
	// Defaulted lists the fields the file left out and that took their
	// default, as field paths: "dataDir", "notify.listen", "explorer.listen",
	// "bindings.orders.visibilityTimeout", "bindings.carts.durability",
	// "bindings.carts.path". A dataDir replaced with [WithDataDir] is not
	// listed.
	Defaulted []string

	// index maps a binding's name to its place in Bindings, and origins
	// a queue's name to the queues that dead-letter into it, so that
	// Binding and DeadLetterOrigins cost the same in a stack of 10,000
	// bindings as in one of 10. Parse and Load build them; a Stack made
	// by hand has neither and is searched.
	index   map[string]int
	origins map[string][]int
	// sqsIndex maps the SQS name of a created queue whose SQS name is not
	// its binding name to its place in Bindings.
	sqsIndex map[string]int
}

// Notify configures the embedded NATS server that carries wake-up hints.
type Notify struct {
	// Listen is host:port; port 0 picks a free port. The host is an IP
	// literal or localhost. Defaults to [DefaultListen] of the stack's
	// data dir.
	Listen string
	// ListenGiven reports that the stack file set listen: a port that is
	// taken is then an error, where up moves off a taken default port to
	// a free one (and says so).
	ListenGiven bool
	// Token is the NATS authorization token; "" for none. Required when the
	// host of Listen is not a loopback address.
	Token string
}

// JetStream is the stack file's optional jetstream section: the NATS
// cluster that jetstream bindings use instead of up's embedded server. It
// holds no secret: the token is kept by the name of the variable that
// holds it, creds and TLS files by their paths.
type JetStream struct {
	// Servers are nats:// or tls:// URLs of the cluster; empty for up's
	// embedded server.
	Servers []string
	// TokenEnv names the environment variable that holds the cluster's
	// token (the stack file says token: ${NAME}); "" for none.
	TokenEnv string
	// Creds is the absolute path of a NATS credentials file; "" for none.
	Creds string
	// TLS holds the absolute paths of the TLS files; each "" when not set.
	TLS TLS
}

// TLS are the files of a TLS connection to a JetStream cluster.
type TLS struct {
	// CA is a PEM file of the certificate authorities to trust.
	CA string
	// Cert and Key are the client's certificate and key, both or neither.
	Cert, Key string
}

// External reports whether the stack names a cluster of its own
// (jetstream.servers); false means up's embedded server.
func (j *JetStream) External() bool { return len(j.Servers) > 0 }

// Equal reports whether j and o say the same.
func (j JetStream) Equal(o JetStream) bool {
	return strings.Join(j.Servers, "\n") == strings.Join(o.Servers, "\n") && j.TokenEnv == o.TokenEnv &&
		j.Creds == o.Creds && j.TLS == o.TLS
}

// UsesJetStream reports whether any binding has engine jetstream.
func (s *Stack) UsesJetStream() bool {
	for _, b := range s.Bindings {
		if b.Engine == EngineJetStream {
			return true
		}
	}
	return false
}

// Explorer configures the web explorer: pages and a JSON API, on loopback
// only, to look at and operate every binding while up runs.
type Explorer struct {
	// Enabled reports whether up serves the explorer; "explorer: off" turns
	// it off. Defaults to true.
	Enabled bool
	// Listen is host:port on a loopback address (an IP literal or
	// localhost); port 0 picks a free port. Defaults to
	// [DefaultExplorerListen].
	Listen string
	// ListenGiven reports that the stack file set listen: a port that is
	// taken is then an error instead of a reason to pick a free one.
	ListenGiven bool
	// ReadOnly refuses every change through the explorer (send, purge,
	// redrive, put, delete). Defaults to false.
	ReadOnly bool
}

// Binding is one KV store or queue of a stack.
type Binding struct {
	// Name names the binding; it matches [a-z][a-z0-9-]{0,62}.
	Name string
	// Type is [TypeKV] or [TypeQueue].
	Type Type
	// Engine is [EngineSQLite] or [EngineJetStream]. Defaults to
	// [DefaultEngine].
	Engine string
	// Replicas is a jetstream binding's replica count, 1..5; 0 for a
	// sqlite binding. Defaults to [DefaultReplicasEmbedded] on up's
	// embedded server and [DefaultReplicasCluster] with jetstream.servers.
	Replicas int
	// Path is the absolute, cleaned directory of the binding's store.
	// Defaults to <DataDir>/<Type>/<Name>. "" for a jetstream binding,
	// which has no folder.
	Path string
	// AbsolutePathGiven reports that the stack file gave an absolute path,
	// which may lie outside DataDir.
	AbsolutePathGiven bool
	// VisibilityTimeout is how long a received message stays hidden. Zero
	// for a KV binding; for a queue it defaults to [DefaultVisibilityTimeout].
	VisibilityTimeout time.Duration
	// Durability is [DurabilityNormal] or [DurabilityFull]. Defaults to
	// [DefaultDurability].
	Durability string
	// MaxAttempts is how many deliveries a queue message gets before it moves
	// to DeadLetter; 0 means no limit (and DeadLetter is then "").
	MaxAttempts int
	// DeadLetter names the queue binding that receives messages after
	// MaxAttempts deliveries; "" for none.
	DeadLetter string
	// RetryDelay is the delay before a failed message's second delivery in
	// Consume, doubled per failure (+-20% jitter) up to MaxRetryDelay.
	// Zero for a KV binding; for a queue they default to
	// [DefaultRetryDelay] and [DefaultMaxRetryDelay].
	RetryDelay, MaxRetryDelay time.Duration
	// DedupWindow is how long a queue remembers a send's dedup key. Zero
	// for a KV binding; for a queue it defaults to [DefaultDedupWindow].
	DedupWindow time.Duration
	// Line is the line of the binding's name in the stack file; 0 for a
	// created queue.
	Line int
	// Created reports that the SQS API created the queue (CreateQueue): it
	// comes from [SQSStateFile] under DataDir, not from the stack file.
	Created bool
	// SQS holds the SQS attributes of a queue that no stack file field has.
	SQS SQSAttrs
}

// DefaultListen is the stable default notify.listen of a stack whose data
// dir is dataDir (absolute): 127.0.0.1 and a port between DefaultPortBase
// and DefaultPortBase+DefaultPortCount-1 derived from the folder, so that
// every up of the stack listens on the same port (apps keep their
// LOCALCLOUD_NATS_URL across restarts) and two stacks on one machine
// almost never share one.
func DefaultListen(dataDir string) string {
	h := fnv.New32a()
	h.Write([]byte(dataDir))
	return net.JoinHostPort(DefaultListenHost, strconv.Itoa(DefaultPortBase+int(h.Sum32()%DefaultPortCount)))
}

// Binding returns the binding called name.
func (s *Stack) Binding(name string) (*Binding, bool) {
	if s == nil {
		return nil, false
	}
	if s.index != nil {
		i, ok := s.index[name]
		if !ok {
			return nil, false
		}
		if i < len(s.Bindings) && s.Bindings[i].Name == name {
			return &s.Bindings[i], true
		}
		// Bindings was changed after the parse: search it.
	}
	for i := range s.Bindings {
		if s.Bindings[i].Name == name {
			return &s.Bindings[i], true
		}
	}
	return nil, false
}

// DeadLetterOrigins returns the queue bindings whose dead-letter queue is
// the binding called name (with maxAttempts set; the binding itself never),
// in name order.
func (s *Stack) DeadLetterOrigins(name string) []Binding {
	if s == nil {
		return nil
	}
	var out []Binding
	if s.origins != nil {
		ok := true
		for _, i := range s.origins[name] {
			if i >= len(s.Bindings) || !isOrigin(s.Bindings[i], name) {
				ok = false // Bindings was changed after the parse: search it
				break
			}
			out = append(out, s.Bindings[i])
		}
		if ok {
			return out
		}
		out = nil
	}
	for _, o := range s.Bindings {
		if isOrigin(o, name) {
			out = append(out, o)
		}
	}
	return out
}

func isOrigin(o Binding, dlq string) bool {
	return o.Type == TypeQueue && o.DeadLetter == dlq && o.MaxAttempts > 0 && o.Name != dlq
}

// buildIndex fills the lookups of Binding and DeadLetterOrigins, once
// Bindings is final.
func (s *Stack) buildIndex() {
	s.index = make(map[string]int, len(s.Bindings))
	s.origins = make(map[string][]int)
	s.sqsIndex = make(map[string]int)
	for i, b := range s.Bindings {
		s.index[b.Name] = i
		if b.SQS.Name != "" {
			s.sqsIndex[b.SQS.Name] = i
		}
		if isOrigin(b, b.DeadLetter) {
			s.origins[b.DeadLetter] = append(s.origins[b.DeadLetter], i)
		}
	}
}

// Subject returns the NATS subject on which a binding's wake-up hints are
// published: localcloud.<stack>.<binding>.available.
func Subject(stack, binding string) string {
	return "localcloud." + stack + "." + binding + ".available"
}

// EnvName returns the environment variable that carries a binding's store
// directory to a program: LOCALCLOUD_BINDING_ followed by the name in upper
// case with - replaced by _ ("orders-dlq" gives LOCALCLOUD_BINDING_ORDERS_DLQ).
// Binding names cannot contain _, so two bindings never share a variable.
func EnvName(binding string) string {
	return EnvBindingPrefix + strings.ToUpper(strings.ReplaceAll(binding, "-", "_"))
}

// DefaultFile returns the stack file to read when no flag names one: the value
// of $LOCALCLOUD_STACK if set and not empty, else the one [FindStackFile]
// finds from the working directory ([DefaultStackFile] or [AltStackFile],
// relative when in the working directory itself), else [DefaultStackFile].
// getenv is usually [os.Getenv]; nil means os.Getenv.
func DefaultFile(getenv func(string) string) string {
	if getenv == nil {
		getenv = os.Getenv
	}
	if f := getenv(EnvStackFile); f != "" {
		return f
	}
	if wd, err := os.Getwd(); err == nil {
		if path, _, ok := FindStackFile(wd); ok {
			if filepath.Dir(path) == wd {
				return filepath.Base(path)
			}
			return path
		}
	}
	return DefaultStackFile
}

// FindStackFile looks for [DefaultStackFile], then [AltStackFile], in dir
// and then in each parent folder, as git looks for .git: it stops after
// the repository root (a folder holding .git) or the filesystem root.
// It returns the path found (dir joined with the name) and ok, or top, the
// last folder it looked in, and false.
func FindStackFile(dir string) (path, top string, ok bool) {
	dir = filepath.Clean(dir)
	for {
		for _, name := range []string{DefaultStackFile, AltStackFile} {
			p := filepath.Join(dir, name)
			if _, err := os.Stat(p); err == nil {
				return p, dir, true
			}
		}
		if _, err := os.Stat(filepath.Join(dir, ".git")); err == nil {
			return "", dir, false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", dir, false
		}
		dir = parent
	}
}

// An Option changes how [Load] and [Parse] read a stack file.
type Option func(*options)

type options struct {
	lookupEnv func(string) (string, bool)
	dataDir   string
}

// WithLookupEnv sets the function that resolves ${NAME} in values. It
// defaults to [os.LookupEnv]; tests pass a map lookup so that they never
// touch the process environment.
func WithLookupEnv(lookup func(name string) (value string, ok bool)) Option {
	return func(o *options) { o.lookupEnv = lookup }
}

// WithDataDir replaces the stack file's dataDir (or its default) with dir,
// made absolute against the working directory; binding paths relative to
// dataDir follow it. localcloudtest gives each test its own data dir this
// way. An empty dir changes nothing.
func WithDataDir(dir string) Option {
	return func(o *options) { o.dataDir = dir }
}

// Load reads and checks the stack file at path. Relative paths in it are
// resolved against the file's folder. Problems name the file as path was
// given. A file that cannot be read gives a wrapped error (errors.Is(err,
// fs.ErrNotExist) for a missing one); a path that is not a regular file
// gives a [*NotRegularError] and is never read (see [ReadFile]); a file
// with mistakes gives an [*Errors] listing all of them.
func Load(path string, opts ...Option) (*Stack, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("load stack file %s: %w", path, err)
	}
	data, size, err := readStackFile(path)
	if err != nil {
		return nil, err
	}
	if size > MaxFileSize {
		// Parse can only say "larger than"; here the size is known.
		return nil, newErrors([]Problem{{File: path, Msg: fmt.Sprintf("file is %d bytes, larger than the limit of %d bytes", size, MaxFileSize)}})
	}
	return parse(data, path, abs, filepath.Dir(abs), opts)
}

// Parse reads and checks a stack file from r.
//
// filename names the source in problems and, made absolute against the
// working directory, becomes [Stack.File]; pass "" for a source that is not a
// file (problems then start with line:col). baseDir is the folder a relative
// dataDir is resolved against and becomes [Stack.Dir]; "" means the folder of
// filename, or the working directory when filename is "" too. Parse looks at
// the file system under dataDir to check symlinks but never writes.
//
// A read error from r is returned wrapped; a stack with mistakes gives an
// [*Errors] listing all of them.
func Parse(r io.Reader, filename, baseDir string, opts ...Option) (*Stack, error) {
	data, err := readLimited(r)
	if err != nil {
		return nil, fmt.Errorf("parse stack file: read %s: %w", displayName(filename), err)
	}
	var abs string
	if filename != "" {
		if abs, err = filepath.Abs(filename); err != nil {
			return nil, fmt.Errorf("parse stack file %s: %w", filename, err)
		}
	}
	switch {
	case baseDir != "":
	case abs != "":
		baseDir = filepath.Dir(abs)
	default:
		baseDir = "."
	}
	dir, err := filepath.Abs(baseDir)
	if err != nil {
		return nil, fmt.Errorf("parse stack file %s: resolve base folder: %w", displayName(filename), err)
	}
	return parse(data, filename, abs, dir, opts)
}

func displayName(filename string) string {
	if filename == "" {
		return "stack"
	}
	return filename
}

// readLimited reads r up to MaxFileSize+1 bytes; parse refuses the extra byte.
func readLimited(r io.Reader) ([]byte, error) {
	var buf bytes.Buffer
	_, err := io.Copy(&buf, io.LimitReader(r, MaxFileSize+1))
	return buf.Bytes(), err
}

func parse(data []byte, display, abs, dir string, opts []Option) (*Stack, error) {
	o := options{lookupEnv: os.LookupEnv}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.lookupEnv == nil {
		o.lookupEnv = os.LookupEnv
	}
	p := &parser{file: display, lookup: o.lookupEnv}
	if o.dataDir != "" {
		d, err := filepath.Abs(o.dataDir)
		if err != nil {
			return nil, fmt.Errorf("parse stack file %s: resolve data dir %q: %w", displayName(display), o.dataDir, err)
		}
		p.dataDir = d
	}
	s := p.run(data, dir)
	if len(p.probs) > 0 {
		return nil, newErrors(p.probs)
	}
	if probs := mergeCreated(s); len(probs) > 0 {
		return nil, newErrors(probs)
	}
	s.File = abs
	return s, nil
}
