package sqlstore

import (
	"math"
	"regexp"
	"strconv"
	"strings"
)

// numberRE is a decimal number as SQLite's numeric affinity reads one.
var numberRE = regexp.MustCompile(`^\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*$`)

// IntValue reads a value of an INTEGER column as SQLite returned it (the
// driver's int64, float64, string, []byte or nil) when another program may
// have written it: an INTEGER as is; a REAL (Python's time.time()*1000)
// truncated toward zero, or rounded up with up, and clamped to the int64
// range as SQLite's CAST does; a TEXT holding a decimal number as that
// number. ok is false for anything else (other TEXT, BLOB, NULL).
func IntValue(v any, up bool) (n int64, ok bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case float64:
		return floatToInt(x, up), !math.IsNaN(x)
	case string:
		if !numberRE.MatchString(x) {
			return 0, false
		}
		s := strings.TrimSpace(x)
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, true
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !math.IsInf(f, 0) {
			return 0, false
		}
		return floatToInt(f, up), true
	}
	return 0, false
}

func floatToInt(f float64, up bool) int64 {
	if up {
		f = math.Ceil(f)
	}
	switch {
	case math.IsNaN(f):
		return 0
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}
