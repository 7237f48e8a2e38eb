// Package jsengine is the NATS JetStream engine of localcloud's kv and queue
// bindings: it implements bindings/kv/driver and
// bindings/queue/driver over github.com/nats-io/nats.go/jetstream. A binding
// with `engine: jetstream` selects it (up provisions it; kv.FromEnv and
// queue.FromEnv open it through env.go); see docs/ARCHITECTURE.md,
// "JetStream engine", for what holds and what does not.
package jsengine

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv/driver"
)

// hdrExpires is the header that carries a key's expiry, Unix milliseconds.
// The expiry is ours, not the server's: the server's per-message TTL has a
// 1 s minimum and whole-second steps, the kv contract is in milliseconds.
const hdrExpires = "Lc-Expires-Ms"

// serverTTLMargin is added to a TTL (rounded up to whole seconds) for the
// server's own removal of an expired key, which only cleans up: it must
// never come before our logical expiry, even with clock skew between the
// client and the server.
const serverTTLMargin = time.Minute

// casRetries bounds the compare-and-set loop of put-if-absent.
const casRetries = 64

// nameRE is what a location (the bucket name) may be: a stream name token.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// KVEngine is the JetStream engine of the kv binding. Location is the bucket
// name; the bucket is the stream "LCKV_<name>" with subjects
// "lckv.<name>.<key as one hex token per byte>", one message per subject,
// direct get off (reads go through the stream leader, so a process reads its
// own acknowledged writes).
type KVEngine struct {
	// Conn is the connection to the JetStream server or cluster; the
	// engine never closes it.
	Conn *nats.Conn
	// Replicas is the stream's replica count; 0 means 1.
	Replicas int
}

// Open opens or creates the bucket cfg.Location names.
func (e KVEngine) Open(ctx context.Context, cfg driver.Config) (driver.Store, error) {
	if e.Conn == nil {
		return nil, bindings.Errorf(bindings.CodeBindingSetupFailed, "jetstream kv: Conn must not be nil")
	}
	if !nameRE.MatchString(cfg.Location) {
		return nil, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"jetstream kv: location %q: must be 1..64 of A-Z a-z 0-9 _ -", cfg.Location)
	}
	js, err := jetstream.New(e.Conn)
	if err != nil {
		return nil, fmt.Errorf("open jetstream kv %q: %w", cfg.Location, err)
	}
	replicas := e.Replicas
	if replicas == 0 {
		replicas = 1
	}
	want := jetstream.StreamConfig{
		Name:              "LCKV_" + cfg.Location,
		Subjects:          []string{"lckv." + cfg.Location + ".>"},
		MaxMsgsPerSubject: 1,
		Discard:           jetstream.DiscardOld,
		Storage:           jetstream.FileStorage,
		Replicas:          replicas,
		AllowDirect:       false,
		AllowMsgTTL:       true,
		DenyDelete:        false,
	}
	st, err := provision(ctx, js, want, cfg.ReadOnly, checkKVStream)
	if err != nil {
		return nil, fmt.Errorf("open jetstream kv %q: %w", cfg.Location, err)
	}
	if err := waitStreamLeader(ctx, st); err != nil {
		return nil, fmt.Errorf("open jetstream kv %q: %w", cfg.Location, err)
	}
	return &KVStore{js: js, st: st, name: cfg.Location, prefix: "lckv." + cfg.Location + ".",
		clock: time.Now, readOnly: cfg.ReadOnly, url: e.Conn.ConnectedUrlRedacted()}, nil
}

// checkKVStream fails closed on an existing stream whose settings
// contradict the bucket's.
func checkKVStream(have, want jetstream.StreamConfig) error {
	switch {
	case len(have.Subjects) != 1 || have.Subjects[0] != want.Subjects[0]:
		return fmt.Errorf("subjects are %q, want %q", have.Subjects, want.Subjects)
	case have.MaxMsgsPerSubject != 1:
		return fmt.Errorf("max_msgs_per_subject is %d, want 1", have.MaxMsgsPerSubject)
	case have.AllowDirect:
		return errors.New("allow_direct is on, want off (direct get is not read-your-writes)")
	case !have.AllowMsgTTL:
		return errors.New("allow_msg_ttl is off, want on")
	}
	return nil
}

// KVStore is an open KV store of the JetStream engine (KVEngine.Open
// returns it as a driver.Store): a handle, as *sqlitekv.Store is the
// SQLite engine's.
type KVStore struct {
	js       jetstream.JetStream
	st       jetstream.Stream
	name     string
	prefix   string // "lckv.<name>."
	clock    func() time.Time
	readOnly bool
	url      string

	mu     sync.Mutex
	closed bool
}

// subject is the key's subject: one two-hex-digit token per byte, so any
// byte prefix of a key is a token prefix of its subject, and subjects sort
// like keys.
func (s *KVStore) subject(key string) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + 3*len(key))
	b.WriteString(s.prefix)
	const hex = "0123456789abcdef"
	for i := 0; i < len(key); i++ {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteByte(hex[key[i]>>4])
		b.WriteByte(hex[key[i]&15])
	}
	return b.String()
}

// keyOf decodes a subject of this bucket; ok is false for anything else.
func (s *KVStore) keyOf(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, s.prefix)
	if !ok || rest == "" {
		return "", false
	}
	toks := strings.Split(rest, ".")
	out := make([]byte, len(toks))
	for i, t := range toks {
		if len(t) != 2 {
			return "", false
		}
		v, err := strconv.ParseUint(t, 16, 8)
		if err != nil {
			return "", false
		}
		out[i] = byte(v)
	}
	return string(out), true
}

func (s *KVStore) check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("store is closed")
	}
	return nil
}

// entry is the last message of a key: rev 0 when there is none.
type entry struct {
	rev     uint64
	value   []byte
	live    bool
	expires time.Time // zero without a TTL
}

// load reads the key's last message through the stream leader.
func (s *KVStore) load(ctx context.Context, subject string) (entry, error) {
	m, err := s.st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return entry{}, nil
	}
	if err != nil {
		return entry{}, fmt.Errorf("get %s: %w", subject, err)
	}
	e := entry{rev: m.Sequence, value: m.Data, live: s.liveAt(m.Header, s.clock())}
	if v := m.Header.Get(hdrExpires); e.live && v != "" {
		ms, _ := strconv.ParseInt(v, 10, 64) // readable: liveAt said so
		e.expires = time.UnixMilli(ms)
	}
	return e, nil
}

// liveAt reads the expiry header: no header is no expiry; an expiry at or
// before now is expired; a header we cannot read is treated as expired (a
// message we did not write is untrusted).
func (s *KVStore) liveAt(h nats.Header, now time.Time) bool {
	v := h.Get(hdrExpires)
	if v == "" {
		return true
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return false
	}
	return now.UnixMilli() < ms
}

func (s *KVStore) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if err := s.check(); err != nil {
		return nil, false, err
	}
	e, err := s.load(ctx, s.subject(key))
	if err != nil || !e.live {
		return nil, false, err
	}
	if e.value == nil {
		e.value = []byte{}
	}
	return e.value, true, nil
}

func (s *KVStore) Exists(ctx context.Context, key string) (bool, error) {
	_, ok, err := s.Get(ctx, key)
	return ok, err
}

func (s *KVStore) Put(ctx context.Context, key string, value []byte, o driver.Put) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	if s.readOnly {
		return false, errors.New("store is read-only")
	}
	subj := s.subject(key)
	msg := func() *nats.Msg {
		m := nats.NewMsg(subj)
		m.Data = value
		return m
	}
	var opts []jetstream.PublishOpt
	build := func() *nats.Msg {
		m := msg()
		opts = opts[:0]
		if o.HasTTL {
			exp := s.clock().Add(o.TTL)
			m.Header.Set(hdrExpires, strconv.FormatInt(exp.UnixMilli(), 10))
			opts = append(opts, jetstream.WithMsgTTL(serverTTL(o.TTL)))
		}
		return m
	}
	if !o.IfAbsent {
		m := build()
		if _, err := s.js.PublishMsg(ctx, m, opts...); err != nil {
			return false, fmt.Errorf("publish %s: %w", subj, err)
		}
		return true, nil
	}
	// Put-if-absent: compare-and-set on the key's last revision, which is
	// 0 when the key has no message and the expired entry's sequence when
	// it expired (our expiry comes before the server's removal).
	for i := 0; i < casRetries; i++ {
		e, err := s.load(ctx, subj)
		if err != nil {
			return false, err
		}
		if e.live {
			return false, nil
		}
		m := build()
		_, err = s.js.PublishMsg(ctx, m, append(opts, jetstream.WithExpectLastSequencePerSubject(e.rev))...)
		if err == nil {
			return true, nil
		}
		if !isWrongLastSeq(err) {
			return false, fmt.Errorf("publish %s: %w", subj, err)
		}
		// Someone wrote (or the server removed the expired entry)
		// between our read and our write: read again.
	}
	return false, fmt.Errorf("put-if-absent %q: %d compare-and-set conflicts in a row", key, casRetries)
}

// serverTTL is the server's clean-up TTL for a key of ttl.
func serverTTL(ttl time.Duration) time.Duration {
	if ttl < 0 {
		ttl = 0
	}
	return (ttl+time.Second-1)/time.Second*time.Second + serverTTLMargin
}

// isWrongLastSeq is the compare-and-set conflict (10164 on clustered
// streams, 10071 otherwise).
func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

func (s *KVStore) Delete(ctx context.Context, key string) error {
	if err := s.check(); err != nil {
		return err
	}
	if s.readOnly {
		return errors.New("store is read-only")
	}
	subj := s.subject(key)
	if err := s.st.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		return fmt.Errorf("purge %s: %w", subj, err)
	}
	return nil
}

// Scan lists the subjects under the prefix (stream info with a subject
// filter), sorts them, cuts after the cursor and reads the values one by one
// through the leader until limit live keys (and one more, for "more") were
// found. Cost grows with the keys under the prefix; a batched read needs
// direct get, which is not read-your-writes (see the notes).
func (s *KVStore) Scan(ctx context.Context, prefix, after string, limit int) ([]driver.Item, bool, error) {
	if err := s.check(); err != nil {
		return nil, false, err
	}
	ps := s.subject(prefix)
	filter := ps + ".>"
	if prefix == "" {
		filter = s.prefix + ">" // every key
	}
	info, err := s.st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, false, fmt.Errorf("list subjects under %s: %w", ps, err)
	}
	keys := make([]string, 0, len(info.State.Subjects)+1)
	for subj := range info.State.Subjects {
		if k, ok := s.keyOf(subj); ok {
			keys = append(keys, k)
		}
	}
	keys = append(keys, prefix) // the prefix itself may be a key
	sort.Strings(keys)
	var items []driver.Item
	last := ""
	for _, k := range keys {
		if k <= after || k == last || !strings.HasPrefix(k, prefix) {
			continue
		}
		last = k
		e, err := s.load(ctx, s.subject(k))
		if err != nil {
			return nil, false, err
		}
		if !e.live {
			continue
		}
		if len(items) == limit {
			return items, true, nil
		}
		if e.value == nil {
			e.value = []byte{}
		}
		items = append(items, driver.Item{Key: k, Value: e.value, ExpiresAt: e.expires})
	}
	return items, false, nil
}

// Lookup is Get with the key's expiry (zero without a TTL).
func (s *KVStore) Lookup(ctx context.Context, key string) (driver.Entry, bool, error) {
	if err := s.check(); err != nil {
		return driver.Entry{}, false, err
	}
	m, err := s.st.GetLastMsgForSubject(ctx, s.subject(key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return driver.Entry{}, false, nil
	}
	if err != nil {
		return driver.Entry{}, false, fmt.Errorf("get %s: %w", s.subject(key), err)
	}
	if !s.liveAt(m.Header, s.clock()) {
		return driver.Entry{}, false, nil
	}
	e := driver.Entry{Value: m.Data}
	if e.Value == nil {
		e.Value = []byte{}
	}
	if v := m.Header.Get(hdrExpires); v != "" {
		ms, _ := strconv.ParseInt(v, 10, 64) // readable: liveAt said so
		e.ExpiresAt = time.UnixMilli(ms)
	}
	return e, true, nil
}

// Stats lists every key's subject and reads each through the leader (one
// request per key: the expiry is in our header, not the server's state).
// Keys the server already removed after their TTL are counted in neither.
func (s *KVStore) Stats(ctx context.Context) (driver.Stats, error) {
	if err := s.check(); err != nil {
		return driver.Stats{}, err
	}
	info, err := s.st.Info(ctx, jetstream.WithSubjectFilter(s.prefix+">"))
	if err != nil {
		return driver.Stats{}, fmt.Errorf("list subjects of %s: %w", s.name, err)
	}
	var st driver.Stats
	for subj := range info.State.Subjects {
		e, err := s.load(ctx, subj)
		if err != nil {
			return driver.Stats{}, err
		}
		switch {
		case e.rev == 0:
		case e.live:
			st.Live++
		default:
			st.Expired++
		}
	}
	return st, nil
}

func (s *KVStore) Path() string { return "jetstream:" + s.url + "/LCKV_" + s.name }

func (s *KVStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
