package config

import (
	"fmt"
	"slices"
	"strings"
)

// expand replaces ${NAME} in s with lookup(NAME) and $$ with $. A $ followed
// by anything else is kept. It returns one message per reference it could not
// expand: an unset variable, a bad name or a missing }.
func expand(s string, lookup func(string) (string, bool)) (string, []string) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var (
		b    strings.Builder
		errs []string
		seen map[string]bool
	)
	for i := 0; i < len(s); {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			i++
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i += 2
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				errs = append(errs, "${ without a closing }; write $$ for a literal $")
				b.WriteString(s[i:])
				i = len(s)
				continue
			}
			name := s[i+2 : i+2+end]
			i += end + 3
			if !validVarName(name) {
				errs = append(errs, fmt.Sprintf("bad variable name %q in ${...}: use letters, digits and _ (not starting with a digit); write $$ for a literal $", name))
				continue
			}
			v, ok := lookup(name)
			if !ok {
				if !seen[name] {
					if seen == nil {
						seen = make(map[string]bool)
					}
					seen[name] = true
					errs = append(errs, fmt.Sprintf("environment variable %s is not set (used as ${%s}; write $$ for a literal $)", name, name))
				}
				continue
			}
			b.WriteString(v)
		default:
			b.WriteByte('$')
			i++
		}
	}
	return b.String(), errs
}

func validVarName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// varRefs returns the names of the variables s refers to as ${NAME}, in
// order, each once; $$ escapes are skipped.
func varRefs(s string) []string {
	var names []string
	for i := 0; i+1 < len(s); i++ {
		if s[i] != '$' {
			continue
		}
		switch s[i+1] {
		case '$':
			i++
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return names
			}
			if name := s[i+2 : i+2+end]; validVarName(name) && !slices.Contains(names, name) {
				names = append(names, name)
			}
			i += end + 2
		}
	}
	return names
}
