package config

import (
	"strings"

	"gopkg.in/yaml.v3"
)

// Secrets fail closed. A field that holds a secret (notify.token, the
// variable behind jetstream.token, jetstream.creds, and whatever credential
// comes next) turns authentication on only when it holds something: an
// empty token means "no token" to the NATS server and the explorer. So a
// secret that resolves to nothing is an error naming the field and the
// variable, never a silent "auth off". Leaving the field out is how a stack
// says it has none.

// secret reads a field that holds a secret, with ${NAME} expanded. A value
// given but empty after expansion is a problem naming field and the
// variables it came from; given reports that the field was set at all.
func (p *parser) secret(v *yaml.Node, field string) (s string, given, ok bool) {
	s, given, ok = p.str(v, field, "a string")
	if !ok || !given || s != "" {
		return s, given, ok
	}
	p.emptySecret(v, field, rawValue(v))
	return "", true, false
}

// secretVar checks the variable name that a ${NAME}-only secret field
// (jetstream.token) keeps: set but empty is a problem. An unset variable
// is left to the connection that reads it (up, FromEnv), which names it.
func (p *parser) secretVar(v *yaml.Node, field, name string) {
	if val, set := p.lookup(name); set && val == "" {
		p.emptySecret(v, field, "${"+name+"}")
	}
}

// emptySecret reports a secret field whose value raw resolved to "".
func (p *parser) emptySecret(v *yaml.Node, field, raw string) {
	vars := varRefs(raw)
	if len(vars) == 0 {
		p.addf(v, field, "must not be empty: an empty secret would turn authentication off; leave %s out for none", field)
		return
	}
	which := "environment variable " + vars[0] + " is"
	if len(vars) > 1 {
		which = "environment variables " + strings.Join(vars, ", ") + " are"
	}
	p.addf(v, field, "resolves to an empty value: %s set but empty (used as %s); an empty secret would turn authentication off, "+
		"so set %s or leave %s out", which, raw, strings.Join(vars, ", "), field)
}

// rawValue is the text of a scalar node before expansion, "" for any other.
func rawValue(v *yaml.Node) string {
	if n := deref(v); n != nil && n.Kind == yaml.ScalarNode {
		return n.Value
	}
	return ""
}
