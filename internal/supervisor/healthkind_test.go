package supervisor

import "testing"

func TestHealthKind(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]string{
		HealthOK:                                   KindOK,
		"store directory deleted":                  KindMissing,
		"database file deleted":                    KindMissing,
		"store directory replaced by a file":       KindReplaced,
		"database file replaced (different inode)": KindReplaced,
		"store directory mode 0755, want 0700":     KindLooseModes,
		"store directory mode 0755, want 0700; database file replaced (different inode)":                  KindReplaced,
		"database file truncated: 5 bytes is not a whole number of 4096-byte pages; run localcloud check": KindTruncated,
		"not provisioned; localcloud up creates it":                                                       KindNotProvisioned,
		"no database file; localcloud up creates it":                                                      KindNotProvisioned,
		"cannot stat store directory: permission denied":                                                  KindError,
		"something new": KindProblem,
	} {
		if got := HealthKind(msg); got != want {
			t.Errorf("HealthKind(%q) = %q, want %q", msg, got, want)
		}
	}
}
