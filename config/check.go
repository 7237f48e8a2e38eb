package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// check applies defaults and the rules that span fields, bindings and the
// file system, and builds the Stack. dir is the absolute folder of the stack
// file.
func (p *parser) check(r *rawStack, dir string) *Stack {
	s := &Stack{Version: r.version, Name: r.name, Dir: dir}

	s.Notify = Notify{Token: r.token}
	if r.listenNode != nil {
		s.Notify.Listen, s.Notify.ListenGiven = r.listen, true
		p.checkListen(r.listenNode, r.listen, r.token)
	} else {
		s.Defaulted = append(s.Defaulted, "notify.listen")
	}
	if r.dataDirNode == nil && p.dataDir == "" {
		s.Defaulted = append(s.Defaulted, "dataDir")
	}

	s.Explorer = r.explorer
	if s.Explorer.Listen == "" {
		s.Explorer.Listen = DefaultExplorerListen
		if s.Explorer.Enabled {
			s.Defaulted = append(s.Defaulted, "explorer.listen")
		}
	}
	if r.explorerNode != nil {
		p.checkExplorerListen(r.explorerNode, s.Explorer.Listen)
	}

	s.JetStream = p.checkJetStream(&r.js, dir)
	byName := make(map[string]*rawBinding, len(r.bindings))
	for _, rb := range r.bindings {
		byName[rb.b.Name] = rb
	}
	for _, rb := range r.bindings {
		p.checkEngine(rb, s.JetStream.External())
	}
	for _, rb := range r.bindings {
		p.checkSettings(rb, byName)
	}
	p.checkCycles(r.bindings, byName)

	realData, dataOK := p.checkDataDir(s, r)
	if !s.Notify.ListenGiven {
		s.Notify.Listen = DefaultListen(s.DataDir)
	}
	if dataOK {
		real := make(map[*rawBinding]string)
		for _, rb := range r.bindings {
			if rb.b.Engine == EngineJetStream {
				continue // no folder
			}
			if rp, ok := p.checkPath(s, rb, realData); ok {
				real[rb] = rp
			}
		}
		p.checkOverlaps(r.bindings, real)
		p.checkJetStreamDir(s, r.bindings, real)
	}

	s.Bindings = make([]Binding, 0, len(r.bindings))
	for _, rb := range r.bindings {
		s.Bindings = append(s.Bindings, rb.b)
		for _, d := range rb.defaulted {
			s.Defaulted = append(s.Defaulted, bindingField(rb.b.Name, d))
		}
	}
	sort.Slice(s.Bindings, func(i, j int) bool { return s.Bindings[i].Name < s.Bindings[j].Name })
	s.buildIndex()
	return s
}

func bindingField(name, sub string) string {
	f := fieldPath("bindings", name)
	if sub == "" {
		return f
	}
	return fieldPath(f, sub)
}

// checkListen checks notify.listen: host:port with an IP literal or
// localhost, and a token when the host is not loopback.
func (p *parser) checkListen(n *yaml.Node, listen, token string) {
	const field = "notify.listen"
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		p.addf(n, field, "must be host:port such as 127.0.0.1:4222, got %q", listen)
		return
	}
	if !validPort(port) {
		p.addf(n, field, "port must be between 0 and 65535 (0 picks a free port), got %q", port)
	}
	if host == "" {
		p.addf(n, field, "host is missing in %q, which would listen on every interface; use 127.0.0.1:%s", listen, port)
		return
	}
	loopback := strings.EqualFold(host, "localhost")
	if !loopback {
		addr, err := netip.ParseAddr(host)
		if err != nil {
			p.addf(n, field, "host must be an IP address or localhost, got %q", host)
			return
		}
		loopback = addr.IsLoopback()
	}
	if !loopback && token == "" {
		p.addf(n, field, "host %s is not a loopback address, so other machines could send wake-up hints to this stack; set notify.token or use 127.0.0.1", host)
	}
}

// checkExplorerListen checks explorer.listen: host:port on a loopback
// address, as the explorer can change every store.
func (p *parser) checkExplorerListen(n *yaml.Node, listen string) {
	const field = "explorer.listen"
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		p.addf(n, field, "must be host:port such as %s, got %q", DefaultExplorerListen, listen)
		return
	}
	if !validPort(port) {
		p.addf(n, field, "port must be between 0 and 65535 (0 picks a free port), got %q", port)
	}
	if strings.EqualFold(host, "localhost") {
		return
	}
	addr, err := netip.ParseAddr(host)
	if err != nil || !addr.IsLoopback() {
		p.addf(n, field, "host must be a loopback address (127.0.0.1, ::1 or localhost): the explorer can read and change every store; got %q", host)
	}
}

func validPort(port string) bool {
	if port == "" || len(port) > 5 {
		return false
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return false
		}
	}
	n, err := strconv.Atoi(port)
	return err == nil && n <= 65535
}

// checkSettings applies a binding's defaults and checks the settings that
// depend on its type and on other bindings.
func (p *parser) checkSettings(rb *rawBinding, byName map[string]*rawBinding) {
	b := &rb.b
	if b.Durability == "" {
		b.Durability = DefaultDurability
		rb.defaulted = append(rb.defaulted, "durability")
	}
	if !rb.typeOK {
		return
	}
	if b.Type == TypeKV {
		for _, s := range []struct {
			n    *yaml.Node
			name string
		}{{rb.vtNode, "visibilityTimeout"}, {rb.maNode, "maxAttempts"}, {rb.dlNode, "deadLetter"},
			{rb.rdNode, "retryDelay"}, {rb.mrNode, "maxRetryDelay"}, {rb.dwNode, "dedupWindow"}} {
			if s.n != nil {
				p.addf(s.n, bindingField(b.Name, s.name), "only queue bindings have %s; %s is a kv binding", s.name, b.Name)
			}
		}
		b.VisibilityTimeout, b.MaxAttempts, b.DeadLetter = 0, 0, ""
		b.RetryDelay, b.MaxRetryDelay, b.DedupWindow = 0, 0, 0
		return
	}
	if rb.vtNode == nil {
		b.VisibilityTimeout = DefaultVisibilityTimeout
		rb.defaulted = append(rb.defaulted, "visibilityTimeout")
	}
	if rb.rdNode == nil {
		b.RetryDelay = DefaultRetryDelay
	}
	if rb.mrNode == nil {
		b.MaxRetryDelay = DefaultMaxRetryDelay
	}
	if rb.dwNode == nil {
		b.DedupWindow = DefaultDedupWindow
	}
	if rb.maNode != nil && rb.dlNode == nil {
		attempts := "maxAttempts"
		if rb.maOK {
			attempts = strconv.Itoa(b.MaxAttempts)
		}
		p.addf(rb.maNode, bindingField(b.Name, "maxAttempts"), "requires deadLetter: nothing is ever dropped, so set deadLetter to the queue binding that receives a message after %s failed attempts", attempts)
	}
	if rb.dlNode != nil && rb.maNode == nil {
		p.addf(rb.dlNode, bindingField(b.Name, "deadLetter"), "has no effect without maxAttempts: set maxAttempts (%d to %d) to say after how many attempts a message moves to the dead-letter queue", MaxAttemptsMin, MaxAttemptsMax)
	}
	dl := b.DeadLetter
	if dl == "" {
		return
	}
	field := bindingField(b.Name, "deadLetter")
	target, ok := byName[dl]
	switch {
	case dl == b.Name:
		p.addf(rb.dlNode, field, "must name another queue binding, not %s itself", b.Name)
	case !ok:
		p.addf(rb.dlNode, field, "must name a queue binding of this stack, got %q (queue bindings: %s)", dl, p.queueNames(byName, b.Name))
	case target.typeOK && target.b.Type != TypeQueue:
		p.addf(rb.dlNode, field, "must name a queue binding, got %s, a %s binding", dl, target.b.Type)
	case engineOf(target) != engineOf(rb):
		p.addf(rb.dlNode, field, "%s uses engine %s but its dead-letter queue %s uses engine %s; a dead-letter pair must be on one engine",
			b.Name, engineOf(rb), dl, engineOf(target))
	}
}

// checkJetStream checks the jetstream section and resolves its file paths
// against dir, the stack file's folder.
func (p *parser) checkJetStream(r *rawJetStream, dir string) JetStream {
	j := JetStream{TokenEnv: r.tokenEnv}
	if r.serversNode != nil && len(r.servers) == 0 && len(r.serverNodes) == len(deref(r.serversNode).Content) {
		p.addf(r.serversNode, "jetstream.servers", "must list at least one nats:// or tls:// URL; leave jetstream out for up's embedded server")
	}
	for i, srv := range r.servers {
		field := fmt.Sprintf("jetstream.servers[%d]", i)
		u, err := url.Parse(strings.TrimSpace(srv))
		switch {
		case err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" || u.Hostname() == "":
			p.addf(r.serverNodes[i], field, "must be a nats:// or tls:// URL with a host, such as nats://nats-1.internal:4222, got %q", srv)
			continue
		case u.User != nil:
			p.addf(r.serverNodes[i], field, "must not carry a user or password (the stack file is committed to git); use jetstream.token: ${VAR} or jetstream.creds")
			continue
		case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
			p.addf(r.serverNodes[i], field, "must be scheme://host:port without a path or query, got %q", srv)
			continue
		}
		if port := u.Port(); port != "" && !validPort(port) {
			p.addf(r.serverNodes[i], field, "port must be between 1 and 65535, got %q", port)
			continue
		}
		j.Servers = append(j.Servers, u.Scheme+"://"+u.Host)
	}
	for i, f := range r.files {
		n := r.fileNodes[i]
		if n == nil {
			continue
		}
		var abs string
		switch {
		case f == "":
			p.addf(n, fileFields[i], "must not be empty; leave it out for none")
			continue
		case hasTilde(f):
			p.addf(n, fileFields[i], "~ is not expanded, got %q; write ${HOME}%s", f, f[1:])
			continue
		case strings.ContainsRune(f, 0):
			p.addf(n, fileFields[i], "must not contain a NUL byte, got %q", f)
			continue
		case filepath.IsAbs(f):
			abs = filepath.Clean(f)
		default:
			abs = filepath.Join(dir, f)
		}
		switch i {
		case 0:
			j.Creds = abs
		case 1:
			j.TLS.CA = abs
		case 2:
			j.TLS.Cert = abs
		case 3:
			j.TLS.Key = abs
		}
	}
	if (r.fileNodes[2] == nil) != (r.fileNodes[3] == nil) {
		n, field, other := r.fileNodes[2], fileFields[2], fileFields[3]
		if n == nil {
			n, field, other = r.fileNodes[3], fileFields[3], fileFields[2]
		}
		p.addf(n, field, "needs %s too: a client certificate and its key go together", other)
	}
	if len(r.servers) == 0 && r.serversNode == nil {
		for _, x := range []struct {
			n     *yaml.Node
			field string
		}{{r.tokenNode, "jetstream.token"}, {r.fileNodes[0], fileFields[0]}, {r.fileNodes[1], fileFields[1]}, {r.fileNodes[2], fileFields[2]}, {r.fileNodes[3], fileFields[3]}} {
			if x.n != nil {
				p.addf(x.n, x.field, "needs jetstream.servers: up's embedded server uses notify.token and no TLS")
			}
		}
	}
	return j
}

// JetStreamDir is the folder under dataDir where up's embedded server keeps
// JetStream's data.
const JetStreamDir = "jetstream"

// checkJetStreamDir refuses a sqlite binding whose folder is, holds or
// lies inside <dataDir>/jetstream when up's embedded server will keep
// JetStream's data there.
func (p *parser) checkJetStreamDir(s *Stack, bindings []*rawBinding, real map[*rawBinding]string) {
	embedded := !s.JetStream.External()
	used := false
	for _, rb := range bindings {
		used = used || rb.b.Engine == EngineJetStream
	}
	if !embedded || !used {
		return
	}
	js := filepath.Join(s.DataDir, JetStreamDir)
	for _, rb := range bindings {
		if _, ok := real[rb]; !ok {
			continue
		}
		if inside(js, rb.b.Path) || inside(rb.b.Path, js) {
			n := rb.pathNode
			if n == nil {
				n = rb.key
			}
			p.addf(n, bindingField(rb.b.Name, "path"), "folder %s overlaps %s, where up's embedded server keeps JetStream's data; choose another path", rb.b.Path, js)
		}
	}
}

// checkEngine applies a binding's engine and replicas defaults and checks
// what a jetstream binding may not have. external is whether the stack
// names a cluster (jetstream.servers).
func (p *parser) checkEngine(rb *rawBinding, external bool) {
	b := &rb.b
	if b.Engine == "" {
		b.Engine = DefaultEngine // not listed in Defaulted: nearly every binding
	}
	if b.Engine != EngineJetStream {
		if rb.replicasNode != nil {
			p.addf(rb.replicasNode, bindingField(b.Name, "replicas"), "only jetstream bindings have replicas; %s uses engine %s", b.Name, b.Engine)
		}
		b.Replicas = 0
		return
	}
	if rb.pathNode != nil {
		p.addf(rb.pathNode, bindingField(b.Name, "path"), "a jetstream binding has no folder (its data is in the stream); remove path or use engine: sqlite")
		rb.pathNode, rb.path = nil, ""
	}
	switch {
	case rb.replicasNode == nil:
		b.Replicas = DefaultReplicasEmbedded
		if external {
			b.Replicas = DefaultReplicasCluster
		}
		rb.defaulted = append(rb.defaulted, "replicas")
	case rb.replicasOK && (b.Replicas < ReplicasMin || b.Replicas > ReplicasMax):
		p.addf(rb.replicasNode, bindingField(b.Name, "replicas"), "must be %s, got %d", replicasWhat, b.Replicas)
	case rb.replicasOK && !external && b.Replicas > 1:
		p.addf(rb.replicasNode, bindingField(b.Name, "replicas"), "must be 1 on up's embedded server (one node), got %d; set jetstream.servers to use a cluster", b.Replicas)
	}
}

// maxListedNames bounds the binding names a problem lists.
const maxListedNames = 20

// queueNames lists the stack's queue bindings but except, sorted, at most
// maxListedNames of them. The sorted list is made once per parse: a stack
// of thousands of broken deadLetter fields asks for it once each.
func (p *parser) queueNames(byName map[string]*rawBinding, except string) string {
	if p.queues == nil {
		p.queues = []string{}
		for name, rb := range byName {
			if rb.typeOK && rb.b.Type == TypeQueue {
				p.queues = append(p.queues, name)
			}
		}
		sort.Strings(p.queues)
	}
	total := len(p.queues)
	if _, found := slices.BinarySearch(p.queues, except); found {
		total--
	}
	var names []string
	for _, n := range p.queues {
		if n == except {
			continue
		}
		if len(names) == maxListedNames {
			names = append(names, fmt.Sprintf("and %d more", total-maxListedNames))
			break
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// checkCycles reports each cycle in the dead-letter graph once, at the
// member that comes first in the file.
func (p *parser) checkCycles(bindings []*rawBinding, byName map[string]*rawBinding) {
	next := func(rb *rawBinding) *rawBinding {
		if !rb.typeOK || rb.b.Type != TypeQueue || rb.b.DeadLetter == "" || rb.b.DeadLetter == rb.b.Name {
			return nil
		}
		t := byName[rb.b.DeadLetter]
		if t == nil || !t.typeOK || t.b.Type != TypeQueue {
			return nil
		}
		return t
	}
	const (
		unseen = iota
		onPath
		done
	)
	state := make(map[*rawBinding]int, len(bindings))
	for _, start := range bindings {
		var path []*rawBinding
		cur := start
		for cur != nil && state[cur] == unseen {
			state[cur] = onPath
			path = append(path, cur)
			cur = next(cur)
		}
		if cur != nil && state[cur] == onPath {
			i := 0
			for path[i] != cur {
				i++
			}
			cycle := path[i:]
			first := 0
			for j, rb := range cycle {
				if rb.key.Line < cycle[first].key.Line {
					first = j
				}
			}
			names := make([]string, 0, len(cycle)+1)
			for j := range cycle {
				names = append(names, cycle[(first+j)%len(cycle)].b.Name)
			}
			names = append(names, names[0])
			rb := cycle[first]
			p.addf(rb.dlNode, bindingField(rb.b.Name, "deadLetter"), "dead-letter cycle %s: messages would move around it forever; end the chain at a queue without deadLetter", strings.Join(names, " -> "))
		}
		for _, rb := range path {
			state[rb] = done
		}
	}
}

// engineOf is a binding's engine with the default applied.
func engineOf(rb *rawBinding) string {
	if rb.b.Engine == "" {
		return DefaultEngine
	}
	return rb.b.Engine
}
