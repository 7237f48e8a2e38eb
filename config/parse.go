package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

const namePattern = "[a-z][a-z0-9-]{0,62}"

var (
	rootFields      = []string{"version", "name", "dataDir", "notify", "explorer", "sqs", "jetstream", "bindings"}
	jetstreamFields = []string{"servers", "token", "creds", "tls"}
	tlsFields       = []string{"ca", "cert", "key"}
	notifyFields    = []string{"listen", "token"}
	explorerFields  = []string{"listen", "readOnly"}
	bindingFields   = []string{"type", "engine", "replicas", "path", "visibilityTimeout", "durability", "maxAttempts", "deadLetter", "retryDelay", "maxRetryDelay", "dedupWindow"}
)

// parser walks the YAML node tree and collects every problem it meets.
type parser struct {
	file    string
	lookup  func(string) (string, bool)
	dataDir string // WithDataDir's folder, "" for the file's dataDir
	probs   []Problem
	queues  []string            // the queue bindings' names, sorted; nil until queueNames needs them
	real    map[string]resolved // realPath's answers
}

// rawStack is what the walk found, with the nodes kept for positions.
type rawStack struct {
	version      int
	versionSeen  bool // the key is present, whatever its value
	name         string
	nameSeen     bool
	dataDir      string
	dataDirNode  *yaml.Node
	listen       string
	listenNode   *yaml.Node
	token        string
	explorer     Explorer
	explorerNode *yaml.Node // listen, when given
	sqs          rawSQS
	js           rawJetStream
	bindings     []*rawBinding
}

// rawJetStream is the jetstream section as found, with nodes for positions.
type rawJetStream struct {
	node        *yaml.Node // the section; nil when missing
	servers     []string
	serverNodes []*yaml.Node
	serversNode *yaml.Node // nil when not given
	tokenEnv    string
	tokenNode   *yaml.Node
	// files: creds, tls.ca, tls.cert, tls.key as given (expanded), and
	// their nodes (nil when not given).
	files     [4]string
	fileNodes [4]*yaml.Node
}

// fileFields names rawJetStream.files in order.
var fileFields = [4]string{"jetstream.creds", "jetstream.tls.ca", "jetstream.tls.cert", "jetstream.tls.key"}

type rawBinding struct {
	b      Binding
	key    *yaml.Node // the binding's name, for positions
	typeOK bool       // Type is kv or queue
	nameOK bool       // Name matches nameRE
	// defaulted lists the fields that took their default (Stack.Defaulted).
	defaulted []string

	path     string     // as given, expanded; "" for the default
	pathNode *yaml.Node // nil for the default

	engineNode, replicasNode *yaml.Node // nil when not given
	replicasOK               bool       // replicas was read as an integer

	vtNode, maNode, dlNode *yaml.Node // nil when not given
	rdNode, mrNode, dwNode *yaml.Node // retryDelay, maxRetryDelay, dedupWindow; nil when not given
	maOK                   bool       // maxAttempts was read without a problem
}

var lineBreaks = strings.NewReplacer("\n", `\n`, "\r", `\r`)

func (p *parser) addf(n *yaml.Node, field, format string, args ...any) {
	// Values are quoted where they are printed, but error texts from the
	// file system carry paths as they are: keep every problem on one line.
	msg := lineBreaks.Replace(fmt.Sprintf(format, args...))
	pr := Problem{File: p.file, Field: field, Msg: msg}
	if n != nil {
		pr.Line, pr.Col = n.Line, n.Column
	}
	p.probs = append(p.probs, pr)
}

// run parses data and checks it; dir is the absolute folder of the stack file.
func (p *parser) run(data []byte, dir string) *Stack {
	if len(data) > MaxFileSize {
		p.addf(nil, "", "file is larger than %d bytes", MaxFileSize)
		return nil
	}
	// Garbage is reported as such, by its first bad byte and line, whatever
	// its depth: yaml.v3 names neither (yaml.v3 rejects the same bytes, so
	// no stack file it accepts is refused here).
	if msg, bad := notText(data); msg != "" {
		p.addf(&yaml.Node{Line: bad}, "", "invalid YAML: %s", msg)
		return nil
	}
	if depth, line := flowDepth(data); depth > maxFlowDepth {
		p.addf(&yaml.Node{Line: line}, "", "[ ] and { } nest %d levels deep, more than the limit of %d; a stack file needs 3", depth, maxFlowDepth)
		return nil
	}
	root := p.decode(data)
	if root == nil {
		return nil
	}
	raw := p.walk(root)
	if raw == nil {
		return nil
	}
	return p.check(raw, dir)
}

// walk reads the top mapping into a rawStack, reporting structure and type
// problems. It returns nil when the top is not a mapping.
func (p *parser) walk(root *yaml.Node) *rawStack {
	top := deref(root)
	if top == nil || top.Kind != yaml.MappingNode {
		p.addf(root, "", "a stack file must be a mapping with version, name and bindings; got %s", describe(root))
		return nil
	}
	r := &rawStack{explorer: Explorer{Enabled: true}}
	for _, e := range p.entries(top, "") {
		switch e.name {
		case "version":
			r.versionSeen = true
			if isNull(e.val) {
				p.addf(e.val, "version", "must be %d, got nothing", Version)
				continue
			}
			v, ok := p.integer(e.val, "version", strconv.Itoa(Version))
			if !ok {
				continue
			}
			r.version = v
			if v != Version {
				p.addf(e.val, "version", "must be %d, got %d; this localcloud reads version %d stack files", Version, v, Version)
			}
		case "name":
			r.nameSeen = true
			s, given, ok := p.str(e.val, "name", "a stack name")
			if !ok {
				continue
			}
			if !given {
				p.addf(e.val, "name", "must match %s, got nothing", namePattern)
				continue
			}
			r.name = s
			if !nameRE.MatchString(s) {
				p.addf(e.val, "name", "must match %s (a lowercase letter, then up to %d lowercase letters, digits or -), got %q", namePattern, MaxNameLength-1, s)
			}
		case "dataDir":
			s, given, ok := p.str(e.val, "dataDir", "a folder")
			if !ok || !given {
				continue
			}
			r.dataDirNode = e.val
			r.dataDir = s
		case "notify":
			p.notify(r, e.val)
		case "explorer":
			p.explorer(r, e.val)
		case "sqs":
			p.sqs(r, e.val)
		case "jetstream":
			p.jetstream(r, e.val)
		case "bindings":
			p.bindings(r, e.val)
		default:
			p.unknown(e, "", rootFields)
		}
	}
	if !r.versionSeen {
		p.addf(top, "version", "missing; add version: %d", Version)
	}
	if !r.nameSeen {
		p.addf(top, "name", "missing; name the stack with %s, e.g. name: shop", namePattern)
	}
	return r
}

func (p *parser) notify(r *rawStack, v *yaml.Node) {
	n, ok := p.mapping(v, "notify", "a mapping with listen and token")
	if !ok {
		return
	}
	for _, e := range p.entries(n, "notify") {
		switch e.name {
		case "listen":
			s, given, ok := p.str(e.val, "notify.listen", "host:port")
			if ok && given {
				r.listen, r.listenNode = s, e.val
			}
		case "token":
			s, _, ok := p.secret(e.val, "notify.token")
			if ok {
				r.token = s
			}
		default:
			p.unknown(e, "notify", notifyFields)
		}
	}
}

// toggle reads a field that is off (or false), on (or true, or nothing), or
// a mapping: off reports the first; n is the mapping, nil otherwise (and
// when the field is neither, which is reported).
func (p *parser) toggle(v *yaml.Node, field, what string) (off bool, n *yaml.Node) {
	if d := deref(v); d != nil && d.Kind == yaml.ScalarNode && !isNull(v) {
		s, ok := p.scalar(v, field, what)
		if !ok {
			return false, nil
		}
		switch strings.ToLower(s) {
		case "off", "false":
			return true, nil
		case "on", "true":
		default:
			p.addf(v, field, "must be %s, got %q", what, s)
		}
		return false, nil
	}
	n, ok := p.mapping(v, field, what)
	if !ok {
		return false, nil
	}
	return false, n
}

// explorer reads the explorer field: off (or false) turns the explorer
// off, on (or true, or nothing) keeps the defaults, a mapping sets listen
// and readOnly.
func (p *parser) explorer(r *rawStack, v *yaml.Node) {
	off, n := p.toggle(v, "explorer", "off, on, or a mapping with listen and readOnly")
	if off {
		r.explorer.Enabled = false
	}
	if n == nil {
		return
	}
	for _, e := range p.entries(n, "explorer") {
		switch e.name {
		case "listen":
			s, given, ok := p.str(e.val, "explorer.listen", "host:port")
			if ok && given {
				r.explorer.Listen, r.explorer.ListenGiven, r.explorerNode = s, true, e.val
			}
		case "readOnly":
			s, given, ok := p.str(e.val, "explorer.readOnly", "true or false")
			if !ok || !given {
				continue
			}
			switch s {
			case "true":
				r.explorer.ReadOnly = true
			case "false":
				r.explorer.ReadOnly = false
			default:
				p.addf(e.val, "explorer.readOnly", "must be true or false, got %q", s)
			}
		default:
			p.unknown(e, "explorer", explorerFields)
		}
	}
}

// tokenRE is the only form jetstream.token may take: one variable.
var tokenRE = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$`)

// jetstream reads the jetstream section: servers, token, creds, tls.
func (p *parser) jetstream(r *rawStack, v *yaml.Node) {
	n, ok := p.mapping(v, "jetstream", "a mapping with servers, token, creds and tls")
	if !ok {
		return
	}
	r.js.node = v
	for _, e := range p.entries(n, "jetstream") {
		ff := fieldPath("jetstream", e.name)
		switch e.name {
		case "servers":
			if isNull(e.val) {
				continue
			}
			r.js.serversNode = e.val
			list := deref(e.val)
			if list == nil || list.Kind != yaml.SequenceNode {
				p.addf(e.val, ff, "must be a list of nats:// or tls:// URLs, got %s", describe(e.val))
				continue
			}
			for i, it := range list.Content {
				s, ok := p.scalar(it, fmt.Sprintf("%s[%d]", ff, i), "a nats:// or tls:// URL")
				if ok {
					r.js.servers = append(r.js.servers, s)
					r.js.serverNodes = append(r.js.serverNodes, it)
				}
			}
		case "token":
			if isNull(e.val) {
				continue
			}
			r.js.tokenNode = e.val
			sn := deref(e.val)
			if sn == nil || sn.Kind != yaml.ScalarNode {
				p.addf(e.val, ff, "must be ${VAR}, got %s", describe(e.val))
				continue
			}
			m := tokenRE.FindStringSubmatch(strings.TrimSpace(sn.Value))
			if m == nil || sn.ShortTag() != "!!str" {
				// The value is never repeated: it may be the secret.
				p.addf(e.val, ff, "must be ${VAR}, the name of the environment variable that holds the token, got a literal value "+
					"(the stack file is committed to git; localcloud keeps only the variable's name)")
				continue
			}
			r.js.tokenEnv = m[1]
			p.secretVar(e.val, ff, m[1])
		case "creds":
			p.jsFile(r, 0, e.val)
		case "tls":
			tn, ok := p.mapping(e.val, ff, "a mapping with ca, cert and key")
			if !ok {
				continue
			}
			for _, t := range p.entries(tn, ff) {
				switch t.name {
				case "ca":
					p.jsFile(r, 1, t.val)
				case "cert":
					p.jsFile(r, 2, t.val)
				case "key":
					p.jsFile(r, 3, t.val)
				default:
					p.unknown(t, ff, tlsFields)
				}
			}
		default:
			p.unknown(e, "jetstream", jetstreamFields)
		}
	}
}

// jsFile reads the i-th file of the jetstream section (fileFields).
func (p *parser) jsFile(r *rawStack, i int, v *yaml.Node) {
	var s string
	var given, ok bool
	if i == 0 { // creds: a secret's file, refused when empty like one
		s, given, ok = p.secret(v, fileFields[i])
	} else {
		s, given, ok = p.str(v, fileFields[i], "a file path")
	}
	if ok && given {
		r.js.files[i], r.js.fileNodes[i] = s, v
	}
}

func (p *parser) bindings(r *rawStack, v *yaml.Node) {
	n, ok := p.mapping(v, "bindings", "a mapping from binding names to bindings")
	if !ok {
		return
	}
	for _, e := range p.entries(n, "bindings") {
		field := fieldPath("bindings", e.name)
		nameOK := nameRE.MatchString(e.name)
		if !nameOK {
			p.addf(e.key, field, "binding name must match %s (a lowercase letter, then up to %d lowercase letters, digits or -), got %q", namePattern, MaxNameLength-1, e.name)
		}
		rb := &rawBinding{key: e.key, nameOK: nameOK}
		rb.b.Name = e.name
		rb.b.Line = e.key.Line
		r.bindings = append(r.bindings, rb)
		p.binding(rb, field, e)
	}
}

var durationWhat = fmt.Sprintf("a duration between %s and %s", fmtDuration(VisibilityTimeoutMin), fmtDuration(VisibilityTimeoutMax))

var replicasWhat = fmt.Sprintf("an integer between %d and %d", ReplicasMin, ReplicasMax)

var maxAttemptsWhat = fmt.Sprintf("an integer between %d and %d", MaxAttemptsMin, MaxAttemptsMax)

func (p *parser) binding(rb *rawBinding, field string, e entry) {
	n, ok := p.mapping(e.val, field, "a mapping with type and the binding's settings")
	if !ok {
		return
	}
	typeSeen := false
	for _, f := range p.entries(n, field) {
		ff := fieldPath(field, f.name)
		switch f.name {
		case "type":
			typeSeen = true
			s, given, ok := p.str(f.val, ff, "kv or queue")
			if !ok {
				continue
			}
			switch Type(s) {
			case TypeKV, TypeQueue:
				rb.b.Type, rb.typeOK = Type(s), true
			default:
				if !given {
					p.addf(f.val, ff, "missing; must be kv or queue")
				} else {
					p.addf(f.val, ff, "must be kv or queue, got %q", s)
				}
			}
		case "engine":
			s, given, ok := p.str(f.val, ff, "sqlite or jetstream")
			if !ok || !given {
				continue
			}
			rb.engineNode = f.val
			if s != EngineSQLite && s != EngineJetStream {
				p.addf(f.val, ff, "must be %s or %s, got %q", EngineSQLite, EngineJetStream, s)
				continue
			}
			rb.b.Engine = s
		case "replicas":
			if isNull(f.val) {
				continue
			}
			rb.replicasNode = f.val
			i, ok := p.integer(f.val, ff, replicasWhat)
			if !ok {
				continue
			}
			rb.b.Replicas, rb.replicasOK = i, true
		case "path":
			s, given, ok := p.str(f.val, ff, "a folder")
			if !ok || !given {
				continue
			}
			rb.path, rb.pathNode = s, f.val
		case "visibilityTimeout":
			if isNull(f.val) {
				continue
			}
			rb.vtNode = f.val
			rb.b.VisibilityTimeout, _ = p.duration(f.val, ff)
		case "retryDelay", "maxRetryDelay", "dedupWindow":
			if isNull(f.val) {
				continue
			}
			lo, hi, dst, node := time.Duration(0), RetryDelayMax, &rb.b.RetryDelay, &rb.rdNode
			switch f.name {
			case "maxRetryDelay":
				dst, node = &rb.b.MaxRetryDelay, &rb.mrNode
			case "dedupWindow":
				lo, hi, dst, node = DedupWindowMin, DedupWindowMax, &rb.b.DedupWindow, &rb.dwNode
			}
			*node = f.val
			*dst, _ = p.durationIn(f.val, ff, lo, hi)
		case "durability":
			s, given, ok := p.str(f.val, ff, "normal or full")
			if !ok || !given {
				continue
			}
			if s != DurabilityNormal && s != DurabilityFull {
				p.addf(f.val, ff, "must be %s or %s, got %q", DurabilityNormal, DurabilityFull, s)
				continue
			}
			rb.b.Durability = s
		case "maxAttempts":
			if isNull(f.val) {
				continue
			}
			rb.maNode = f.val
			i, ok := p.integer(f.val, ff, maxAttemptsWhat)
			if !ok {
				continue
			}
			if i < MaxAttemptsMin || i > MaxAttemptsMax {
				p.addf(f.val, ff, "must be %s, got %d", maxAttemptsWhat, i)
				continue
			}
			rb.b.MaxAttempts, rb.maOK = i, true
		case "deadLetter":
			if isNull(f.val) {
				continue
			}
			rb.dlNode = f.val
			s, _, ok := p.str(f.val, ff, "a queue binding name")
			if !ok {
				continue
			}
			if s == "" {
				p.addf(f.val, ff, "must name a queue binding of this stack, got nothing")
				continue
			}
			rb.b.DeadLetter = s
		default:
			p.unknown(f, field, bindingFields)
		}
	}
	if !typeSeen {
		p.addf(e.key, fieldPath(field, "type"), "missing; must be kv or queue")
	}
}

// duration reads a visibility timeout: a Go duration such as 30s or 5m,
// between VisibilityTimeoutMin and VisibilityTimeoutMax.
func (p *parser) duration(v *yaml.Node, field string) (time.Duration, bool) {
	s, ok := p.scalar(v, field, durationWhat)
	if !ok {
		return 0, false
	}
	if n := deref(v); n.ShortTag() == "!!int" {
		p.addf(v, field, "must be %s, got %s: add a unit, e.g. %ss", durationWhat, s, s)
		return 0, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d < VisibilityTimeoutMin || d > VisibilityTimeoutMax {
		p.addf(v, field, "must be %s, got %q", durationWhat, s)
		return 0, false
	}
	return d, true
}

// durationIn reads a Go duration between lo and hi.
func (p *parser) durationIn(v *yaml.Node, field string, lo, hi time.Duration) (time.Duration, bool) {
	what := fmt.Sprintf("a duration between %s and %s", fmtDuration(lo), fmtDuration(hi))
	s, ok := p.scalar(v, field, what)
	if !ok {
		return 0, false
	}
	if n := deref(v); n.ShortTag() == "!!int" {
		p.addf(v, field, "must be %s, got %s: add a unit, e.g. %sms", what, s, s)
		return 0, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d < lo || d > hi {
		p.addf(v, field, "must be %s, got %q", what, s)
		return 0, false
	}
	return d, true
}

// fmtDuration prints 12h rather than 12h0m0s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64 // far from every field name; keeps the cost bounded
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
