package notify

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

const (
	// SubjectPrefix is the first token of every hint subject.
	SubjectPrefix = "localcloud"

	// SubjectSuffix is the last token of every hint subject.
	SubjectSuffix = "available"

	// DueUnknown is Hint.Due when the sender did not count the due messages.
	DueUnknown int64 = -1
)

// Hint is the JSON payload of one hint. Consumers must ignore fields they do not know.
type Hint struct {
	// Binding is the queue binding name, the third token of the subject.
	Binding string `json:"binding"`

	// Due is the number of messages due in the queue when the hint was sent, or DueUnknown (-1).
	// It is a snapshot for logs and metrics, never a promise: read the store.
	Due int64 `json:"due"`

	// At is when the hint was published, in Unix milliseconds. An integer rather than a
	// timestamp string so that every language reads it without a date parser.
	At int64 `json:"at"`

	// LastID is the largest message id inserted by the sends this hint reports, when its
	// publisher knows them (localcloud's queue library does); 0, and absent from the JSON,
	// otherwise. The hint is published after that message's commit, and the ids of the spec's
	// AUTOINCREMENT messages table grow in commit order, so the hint follows every insert with
	// an id up to LastID: `localcloud up` publishes no hint of its own for those.
	LastID int64 `json:"lastId,omitempty"`
}

// Time returns At as a time.Time.
func (h Hint) Time() time.Time { return time.UnixMilli(h.At) }

// ParseHint decodes a hint payload.
func ParseHint(data []byte) (Hint, error) {
	var h Hint
	if err := json.Unmarshal(data, &h); err != nil {
		return Hint{}, fmt.Errorf("decode hint: %w", err)
	}
	return h, nil
}

// Subject returns the hint subject of a queue binding: localcloud.<stack>.<binding>.available.
// It does not validate the names; see CheckName.
func Subject(stack, binding string) string {
	return SubjectPrefix + "." + stack + "." + binding + "." + SubjectSuffix
}

// ParseSubject is the inverse of Subject. ok is false when subject is not a hint subject.
func ParseSubject(subject string) (stack, binding string, ok bool) {
	parts := strings.Split(subject, ".")
	if len(parts) != 4 || parts[0] != SubjectPrefix || parts[3] != SubjectSuffix || parts[1] == "" || parts[2] == "" {
		return "", "", false
	}
	return parts[1], parts[2], true
}

// CheckName reports whether name can be a stack or binding name in a hint subject and in an
// AsyncAPI document: one or more ASCII letters, digits, '_' or '-'. The error wraps
// ErrInvalidName.
func CheckName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	for _, r := range name {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '_', r == '-':
		default:
			return fmt.Errorf("%w %q: only letters, digits, '_' and '-' are allowed", ErrInvalidName, name)
		}
	}
	return nil
}
