package supervisor

import "strings"

// Health kinds: the enum `localcloud status --json` reports beside each
// health message.
const (
	KindOK             = "ok"
	KindMissing        = "missing"         // the store directory or database file was deleted
	KindReplaced       = "replaced"        // ... replaced by another file or directory (another inode)
	KindTruncated      = "truncated"       // the database file was cut
	KindLooseModes     = "loose-modes"     // a mode other than 0700 / 0600
	KindNotProvisioned = "not-provisioned" // no store yet (up not running); up creates it
	KindError          = "error"           // the store could not be examined (stat failed)
	KindProblem        = "problem"         // anything else
)

// healthKinds maps a phrase of the messages of check, lock.check and
// status's offline check to its kind, most serious first.
var healthKinds = []struct{ phrase, kind string }{
	{"deleted", KindMissing},
	{"lost", KindMissing},
	{"replaced", KindReplaced},
	{"truncated", KindTruncated},
	{"mode ", KindLooseModes},
	{"not provisioned", KindNotProvisioned},
	{"localcloud up creates it", KindNotProvisioned},
	{"cannot stat", KindError},
}

// HealthKind classifies a health message (HealthOK or one or more problems
// joined by "; ") as one of the Kind constants: the kind of its most
// serious problem.
func HealthKind(msg string) string {
	if msg == HealthOK || msg == "" {
		return KindOK
	}
	for _, k := range healthKinds {
		if strings.Contains(msg, k.phrase) {
			return k.kind
		}
	}
	return KindProblem
}
