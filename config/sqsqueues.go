package config

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// SQSStateFile is the file under a stack's dataDir in which up keeps the
// queues that the SQS API created (CreateQueue) and every queue's SQS tags.
// [Load] and [Parse] merge its queues into the stack as bindings with
// Created set, so every tool sees them through the one stack; a binding of
// the stack file with the same name wins (the file's entry is ignored while
// it exists).
const SQSStateFile = "sqs-queues.json"

// Limits of the SQS state file and of the SQS API's queues, as Amazon SQS
// sets them.
const (
	SQSStateVersion     = 1
	MaxSQSStateSize     = 16 << 20
	MaxCreatedQueues    = 10000
	MaxSQSTags          = 50
	MaxSQSTagKeyLength  = 128
	MaxSQSTagValueLen   = 256
	MaxSQSDelaySeconds  = 900
	MaxSQSWaitSeconds   = 20
	MinSQSRetentionSecs = 60
	MaxSQSRetentionSecs = 14 * 24 * 3600
	// DefaultSQSRetentionSecs is SQS's default MessageRetentionPeriod, 4
	// days: only reported, localcloud keeps a message until it is deleted.
	DefaultSQSRetentionSecs = 4 * 24 * 3600
)

// SQSNamePattern is what SQS accepts as a queue name.
const SQSNamePattern = "[A-Za-z0-9_-]{1,80}"

var sqsNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// CheckCreatedQueueName is nil when name may be given to a queue that the
// SQS API creates: any SQS queue name. A name that is not also a binding
// name (binding names appear in NATS subjects, folder and variable names)
// gets the binding name [DeriveBindingName] gives.
func CheckCreatedQueueName(name string) error {
	if !sqsNameRE.MatchString(name) {
		return fmt.Errorf("must match %s (SQS's queue names: 1 to 80 letters, digits, - or _), got %q", SQSNamePattern, name)
	}
	return nil
}

// IsBindingName reports whether name is a valid binding name.
func IsBindingName(name string) bool { return nameRE.MatchString(name) }

// bindingHashLen is the length of the hash suffix of a derived binding name.
const bindingHashLen = 8

// DeriveBindingName is the binding name of a queue the SQS API creates
// under the SQS name sqsName: sqsName itself when it is a binding name,
// else sqsName in lower case with _ turned into -, after "q-" when it does
// not start with a letter, cut to fit, then "-" and a hash of sqsName (8
// characters of [a-z2-7]), so that two SQS names ("A_b", "a-b", "a_b")
// never share a binding name by derivation.
func DeriveBindingName(sqsName string) string {
	if nameRE.MatchString(sqsName) {
		return sqsName
	}
	base := strings.ReplaceAll(strings.ToLower(sqsName), "_", "-")
	if base == "" || base[0] < 'a' || base[0] > 'z' {
		base = "q-" + base
	}
	sum := sha256.Sum256([]byte(sqsName))
	suffix := strings.ToLower(base32.StdEncoding.EncodeToString(sum[:]))[:bindingHashLen]
	if max := MaxNameLength - 1 - bindingHashLen; len(base) > max {
		base = base[:max]
	}
	return base + "-" + suffix
}

// SQSState is the content of [SQSStateFile].
type SQSState struct {
	Version int `json:"version"`
	// Queues are the queues the SQS API created, sorted by name.
	Queues []CreatedQueue `json:"queues"`
	// Tags are the SQS tags of queues by binding name (created queues and
	// stack bindings alike).
	Tags map[string]map[string]string `json:"tags,omitempty"`
}

// CreatedQueue is one queue the SQS API created.
type CreatedQueue struct {
	// Name is the queue's SQS name (case-sensitive), as SQS shows it.
	Name string `json:"name"`
	// Binding is the binding name, when it is not Name (an SQS name that
	// is no binding name: see [DeriveBindingName]).
	Binding string `json:"binding,omitempty"`
	// Engine and Replicas are chosen once, at creation.
	Engine   string `json:"engine"`
	Replicas int    `json:"replicas,omitempty"`
	// VisibilityTimeout, DelaySeconds, ReceiveMessageWaitTimeSeconds and
	// MessageRetentionPeriod are in seconds, as SQS gives them.
	VisibilityTimeout int `json:"visibilityTimeout"`
	DelaySeconds      int `json:"delaySeconds,omitempty"`
	WaitTimeSeconds   int `json:"receiveMessageWaitTimeSeconds,omitempty"`
	RetentionPeriod   int `json:"messageRetentionPeriod"`
	// MaxReceiveCount and DeadLetter are the RedrivePolicy (0 and "" for
	// none); DeadLetter is the dead-letter queue's binding name.
	MaxReceiveCount int    `json:"maxReceiveCount,omitempty"`
	DeadLetter      string `json:"deadLetter,omitempty"`
	// Created is the creation time, Unix seconds.
	Created int64 `json:"created"`
}

// SQSAttrs are the SQS attributes of a binding that no stack file field
// has. A stack binding has its zero value.
type SQSAttrs struct {
	// Name is a created queue's SQS name when it is not the binding's
	// name; "" when it is (always for a stack binding).
	Name string
	// DelaySeconds is the queue's default delay of a SendMessage,
	// WaitTimeSeconds a ReceiveMessage's default long poll.
	DelaySeconds, WaitTimeSeconds int
	// RetentionSeconds is reported only.
	RetentionSeconds int
	// Created is when CreateQueue created the queue, Unix seconds; 0 for
	// a stack binding.
	Created int64
}

// BindingName is the binding name of q: Binding, or Name when Binding is "".
func (q CreatedQueue) BindingName() string {
	if q.Binding != "" {
		return q.Binding
	}
	return q.Name
}

// SQSName is the name under which the SQS API shows b: its binding name,
// unless CreateQueue created it under an SQS name that is no binding name.
func (b Binding) SQSName() string {
	if b.SQS.Name != "" {
		return b.SQS.Name
	}
	return b.Name
}

// SQSQueue returns the queue binding that the SQS API shows under the
// SQS name name (names are case-sensitive, as in SQS).
func (s *Stack) SQSQueue(name string) (*Binding, bool) {
	if s == nil {
		return nil, false
	}
	if b, ok := s.Binding(name); ok && b.SQS.Name == "" {
		return b, b.Type == TypeQueue
	}
	if s.sqsIndex != nil {
		if i, ok := s.sqsIndex[name]; ok && i < len(s.Bindings) && s.Bindings[i].SQS.Name == name {
			return &s.Bindings[i], true
		}
		if len(s.sqsIndex) == 0 {
			return nil, false
		}
	}
	for i := range s.Bindings {
		if s.Bindings[i].SQS.Name == name {
			return &s.Bindings[i], true
		}
	}
	return nil, false
}

// SQSStatePath is the state file of a stack whose dataDir is dataDir.
func SQSStatePath(dataDir string) string { return filepath.Join(dataDir, SQSStateFile) }

// ReadSQSState reads and checks the state file under dataDir; a missing
// file is an empty state. The file is untrusted: every mistake is an error
// naming the file, the field, the limit and the value.
func ReadSQSState(dataDir string) (SQSState, error) {
	st, err := readSQSState(dataDir)
	if err != nil {
		return st, fmt.Errorf("%s: %w", SQSStatePath(dataDir), err)
	}
	return st, nil
}

// readSQSState is ReadSQSState with errors that do not name the file.
func readSQSState(dataDir string) (SQSState, error) {
	path := SQSStatePath(dataDir)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return SQSState{Version: SQSStateVersion}, nil
	}
	if err == nil && !fi.Mode().IsRegular() {
		return SQSState{}, fmt.Errorf("not a regular file (%s); up writes a plain file there", fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return SQSState{}, fmt.Errorf("read: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSQSStateSize+1))
	if err != nil {
		return SQSState{}, fmt.Errorf("read: %w", err)
	}
	if len(data) > MaxSQSStateSize {
		return SQSState{}, fmt.Errorf("larger than the limit of %d bytes", MaxSQSStateSize)
	}
	var st SQSState
	if err := json.Unmarshal(data, &st); err != nil {
		return SQSState{}, fmt.Errorf("not the JSON localcloud writes: %v", err)
	}
	if err := st.check(); err != nil {
		return SQSState{}, err
	}
	return st, nil
}

// check verifies what a CreatedQueue and the tags may hold.
func (st *SQSState) check() error {
	if st.Version != SQSStateVersion {
		return fmt.Errorf("version must be %d, got %d", SQSStateVersion, st.Version)
	}
	if len(st.Queues) > MaxCreatedQueues {
		return fmt.Errorf("queues: at most %d, got %d", MaxCreatedQueues, len(st.Queues))
	}
	seen := make(map[string]bool, len(st.Queues))
	binding := make(map[string]string, len(st.Queues))
	for i, q := range st.Queues {
		if err := q.Check(); err != nil {
			return fmt.Errorf("queues[%d]: %w", i, err)
		}
		if seen[q.Name] {
			return fmt.Errorf("queues[%d]: name %s appears twice", i, q.Name)
		}
		seen[q.Name] = true
		if other, ok := binding[q.BindingName()]; ok {
			return fmt.Errorf("queues[%d]: binding name %s of queue %s is also the binding name of queue %s", i, q.BindingName(), q.Name, other)
		}
		binding[q.BindingName()] = q.Name
	}
	for name, tags := range st.Tags {
		if err := CheckSQSTags(tags); err != nil {
			return fmt.Errorf("tags.%s: %w", name, err)
		}
	}
	return nil
}

// Check verifies a created queue's fields against SQS's limits.
func (q CreatedQueue) Check() error {
	if err := CheckCreatedQueueName(q.Name); err != nil {
		return fmt.Errorf("name %w", err)
	}
	switch {
	case q.Binding == "" && !nameRE.MatchString(q.Name):
		return fmt.Errorf("queue %s: binding must be set (to a name matching %s) when the name is no binding name, got nothing", q.Name, namePattern)
	case q.Binding != "" && nameRE.MatchString(q.Name):
		return fmt.Errorf("queue %s: binding must be left out when the name is a binding name, got %q", q.Name, q.Binding)
	case q.Binding != "" && !nameRE.MatchString(q.Binding):
		return fmt.Errorf("queue %s: binding must match %s (a lowercase letter, then up to %d lowercase letters, digits or -), got %q", q.Name, namePattern, MaxNameLength-1, q.Binding)
	case q.Binding != "" && q.Binding != DeriveBindingName(q.Name):
		return fmt.Errorf("queue %s: binding must be %s (derived from the name), got %q", q.Name, DeriveBindingName(q.Name), q.Binding)
	}
	in := func(field string, v, lo, hi int) error {
		if v < lo || v > hi {
			return fmt.Errorf("queue %s: %s must be %d to %d, got %d", q.Name, field, lo, hi, v)
		}
		return nil
	}
	for _, c := range []error{
		in("VisibilityTimeout", q.VisibilityTimeout, int(VisibilityTimeoutMin/time.Second), int(VisibilityTimeoutMax/time.Second)),
		in("DelaySeconds", q.DelaySeconds, 0, MaxSQSDelaySeconds),
		in("ReceiveMessageWaitTimeSeconds", q.WaitTimeSeconds, 0, MaxSQSWaitSeconds),
		in("MessageRetentionPeriod", q.RetentionPeriod, MinSQSRetentionSecs, MaxSQSRetentionSecs),
	} {
		if c != nil {
			return c
		}
	}
	switch q.Engine {
	case EngineSQLite:
		if q.Replicas != 0 {
			return fmt.Errorf("queue %s: replicas must be 0 on engine %s, got %d", q.Name, q.Engine, q.Replicas)
		}
	case EngineJetStream:
		if err := in("replicas", q.Replicas, ReplicasMin, ReplicasMax); err != nil {
			return err
		}
	default:
		return fmt.Errorf("queue %s: engine must be %s or %s, got %q", q.Name, EngineSQLite, EngineJetStream, q.Engine)
	}
	if (q.MaxReceiveCount == 0) != (q.DeadLetter == "") {
		return fmt.Errorf("queue %s: RedrivePolicy needs both maxReceiveCount and deadLetterTargetArn, got %d and %q", q.Name, q.MaxReceiveCount, q.DeadLetter)
	}
	if q.DeadLetter != "" {
		if err := in("maxReceiveCount", q.MaxReceiveCount, MaxAttemptsMin, MaxAttemptsMax); err != nil {
			return err
		}
		if !nameRE.MatchString(q.DeadLetter) {
			return fmt.Errorf("queue %s: deadLetter must be a binding name matching %s, got %q", q.Name, namePattern, q.DeadLetter)
		}
		if q.DeadLetter == q.BindingName() {
			return fmt.Errorf("queue %s: the dead-letter queue must be another queue, got itself", q.Name)
		}
	}
	return nil
}

// ErrBindingTaken is wrapped by the error of a CreateQueue whose binding
// name, derived from its SQS name, is another binding's: the queue is
// refused rather than aliased.
var ErrBindingTaken = errors.New("the binding name derived from the SQS name is taken; choose another queue name")

// ErrSQSLimit is wrapped by the errors of CheckSQSTags and by those of a
// CreateQueue beyond MaxCreatedQueues.
var ErrSQSLimit = errors.New("beyond the SQS API's limits")

// CheckSQSTags checks a queue's tags against SQS's limits.
func CheckSQSTags(tags map[string]string) error {
	if len(tags) > MaxSQSTags {
		return fmt.Errorf("%w: a queue has at most %d tags, got %d", ErrSQSLimit, MaxSQSTags, len(tags))
	}
	for k, v := range tags {
		if len(k) < 1 || len(k) > MaxSQSTagKeyLength {
			return fmt.Errorf("%w: a tag key is 1 to %d characters, got %d (%q)", ErrSQSLimit, MaxSQSTagKeyLength, len(k), k)
		}
		if len(v) > MaxSQSTagValueLen {
			return fmt.Errorf("%w: a tag value is at most %d characters, got %d (tag %s)", ErrSQSLimit, MaxSQSTagValueLen, len(v), k)
		}
	}
	return nil
}

// WriteSQSState replaces the state file under dataDir atomically: a
// crash leaves the old file or the new one, never a mix.
func WriteSQSState(dataDir string, st SQSState) error {
	st.Version = SQSStateVersion
	sort.Slice(st.Queues, func(i, j int) bool { return st.Queues[i].Name < st.Queues[j].Name })
	if err := st.check(); err != nil {
		return err
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	path := SQSStatePath(dataDir)
	tmp, err := os.CreateTemp(dataDir, SQSStateFile+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = tmp.Write(append(data, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dataDir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// mergeCreated adds the queues of the state file under s.DataDir to s as
// bindings with Created set.
// A created queue whose name the stack file uses is left out: the stack
// file wins.
func mergeCreated(s *Stack) []Problem {
	st, err := readSQSState(s.DataDir)
	if err != nil {
		return []Problem{{File: SQSStatePath(s.DataDir), Msg: err.Error() +
			" (the queues created through the SQS API and the queues' tags; fix it, or move it away to go on without them)"}}
	}
	if len(st.Queues) == 0 {
		return nil
	}
	var probs []Problem
	bad := func(q CreatedQueue, format string, args ...any) {
		probs = append(probs, Problem{File: SQSStatePath(s.DataDir), Field: "queues." + q.Name,
			Msg: fmt.Sprintf(format, args...) + "; delete the queue through the SQS API or fix the stack file"})
	}
	paths := make(map[string]string, len(s.Bindings))
	for _, b := range s.Bindings {
		if b.Path != "" {
			paths[b.Path] = b.Name
		}
	}
	added := 0
	for _, q := range st.Queues {
		if _, ok := s.Binding(q.BindingName()); ok {
			if q.Binding != "" {
				bad(q, "its binding name %s is a binding of the stack file; the two would share a store", q.Binding)
			}
			continue // the stack file wins
		}
		sqsName := ""
		if q.Binding != "" {
			sqsName = q.Name
		}
		b := Binding{Name: q.BindingName(), Type: TypeQueue, Engine: q.Engine, Replicas: q.Replicas, Durability: DefaultDurability,
			VisibilityTimeout: time.Duration(q.VisibilityTimeout) * time.Second, MaxAttempts: q.MaxReceiveCount, DeadLetter: q.DeadLetter,
			RetryDelay: DefaultRetryDelay, MaxRetryDelay: DefaultMaxRetryDelay, DedupWindow: DefaultDedupWindow, Created: true,
			SQS: SQSAttrs{Name: sqsName, DelaySeconds: q.DelaySeconds, WaitTimeSeconds: q.WaitTimeSeconds, RetentionSeconds: q.RetentionPeriod, Created: q.Created}}
		if q.Engine == EngineSQLite {
			b.Path = filepath.Join(s.DataDir, string(TypeQueue), b.Name)
			if other, ok := paths[b.Path]; ok {
				bad(q, "its folder %s is the path of binding %s", b.Path, other)
				continue
			}
		} else if !s.JetStream.External() && q.Replicas != 1 {
			bad(q, "replicas must be 1 on up's embedded server, got %d", q.Replicas)
			continue
		}
		s.Bindings = append(s.Bindings, b)
		added++
	}
	if added == 0 {
		return probs
	}
	sort.Slice(s.Bindings, func(i, j int) bool { return s.Bindings[i].Name < s.Bindings[j].Name })
	s.buildIndex()
	for _, b := range s.Bindings {
		if !b.Created || b.DeadLetter == "" {
			continue
		}
		dl, ok := s.Binding(b.DeadLetter)
		switch {
		case !ok || dl.Type != TypeQueue:
			probs = append(probs, Problem{File: SQSStatePath(s.DataDir), Field: "queues." + b.Name,
				Msg: fmt.Sprintf("its dead-letter queue %s is no queue of the stack; add it back to the stack file or delete %s through the SQS API", b.DeadLetter, b.Name)})
		case dl.Engine != b.Engine:
			probs = append(probs, Problem{File: SQSStatePath(s.DataDir), Field: "queues." + b.Name,
				Msg: fmt.Sprintf("uses engine %s but its dead-letter queue %s uses engine %s; a dead-letter pair must be on one engine", b.Engine, dl.Name, dl.Engine)})
		default:
			cur := dl
			for i := 0; i < len(s.Bindings) && cur.DeadLetter != "" && cur.MaxAttempts > 0; i++ {
				if cur.DeadLetter == b.Name {
					probs = append(probs, Problem{File: SQSStatePath(s.DataDir), Field: "queues." + b.Name,
						Msg: fmt.Sprintf("dead-letter cycle through %s: messages would move around it forever", b.DeadLetter)})
					break
				}
				if cur, ok = s.Binding(cur.DeadLetter); !ok {
					break
				}
			}
		}
	}
	return probs
}
