package config

import (
	"net"
	"net/netip"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// Defaults of the sqs section.
const (
	// DefaultSQSListen is the address of the SQS API that up serves when
	// the stack sets none (the port of ElasticMQ and goaws, which SQS
	// apps are often pointed at already).
	DefaultSQSListen = "127.0.0.1:9324"
	// DefaultSQSRegion is the region of queue ARNs and signatures.
	DefaultSQSRegion = "us-east-1"
)

var sqsFields = []string{"listen", "region", "accessKeyId", "secretAccessKey"}

var regionRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// SQS configures the SQS-compatible API that up serves over the stack's
// queue bindings.
type SQS struct {
	// Enabled reports whether up serves it: by default when the stack has
	// a queue binding; "sqs: off" turns it off.
	Enabled bool
	// Listen is host:port; port 0 picks a free port. A loopback address
	// unless the key pair is set. Defaults to [DefaultSQSListen].
	Listen string
	// ListenGiven reports that the stack file set listen: a port that is
	// taken is then an error instead of a reason to pick a free one.
	ListenGiven bool
	// Region is the region of ARNs and signatures. Defaults to
	// [DefaultSQSRegion].
	Region string
	// AccessKeyID and SecretAccessKey, both set or neither: when set, the
	// signature (SigV4) of every request is checked with them.
	AccessKeyID, SecretAccessKey string
}

// rawSQS is the sqs section as found.
type rawSQS struct {
	off                    bool
	listen, region         string
	listenNode, regionNode *yaml.Node
	keyID, secret          string
	keyNode, secretNode    *yaml.Node
	node                   *yaml.Node
}

// sqs reads the sqs field: off (or false) turns the API off, on (or true,
// or nothing) keeps the defaults, a mapping sets its fields.
func (p *parser) sqs(r *rawStack, v *yaml.Node) {
	r.sqs.node = v
	off, n := p.toggle(v, "sqs", "off, on, or a mapping with listen, region, accessKeyId and secretAccessKey")
	if off {
		r.sqs.off = true
	}
	if n == nil {
		return
	}
	for _, e := range p.entries(n, "sqs") {
		switch e.name {
		case "listen":
			if s, given, ok := p.str(e.val, "sqs.listen", "host:port"); ok && given {
				r.sqs.listen, r.sqs.listenNode = s, e.val
			}
		case "region":
			if s, given, ok := p.str(e.val, "sqs.region", "a region such as us-east-1"); ok && given {
				r.sqs.region, r.sqs.regionNode = s, e.val
			}
		case "accessKeyId":
			if s, given, _ := p.secret(e.val, "sqs.accessKeyId"); given {
				r.sqs.keyID, r.sqs.keyNode = s, e.val // an empty one is a problem already
			}
		case "secretAccessKey":
			if s, given, _ := p.secret(e.val, "sqs.secretAccessKey"); given {
				r.sqs.secret, r.sqs.secretNode = s, e.val // an empty one is a problem already
			}
		default:
			p.unknown(e, "sqs", sqsFields)
		}
	}
}

// checkSQS turns the sqs section into the stack's SQS: on by default when
// the stack has a queue binding.
func (p *parser) checkSQS(s *Stack, r *rawStack) {
	raw := r.sqs
	hasQueue := false
	for _, rb := range r.bindings {
		hasQueue = hasQueue || rb.b.Type == TypeQueue
	}
	s.SQS = SQS{Enabled: !raw.off && hasQueue, Listen: raw.listen, ListenGiven: raw.listenNode != nil,
		Region: raw.region, AccessKeyID: raw.keyID, SecretAccessKey: raw.secret}
	if s.SQS.Listen == "" {
		s.SQS.Listen = DefaultSQSListen
		if s.SQS.Enabled {
			s.Defaulted = append(s.Defaulted, "sqs.listen")
		}
	}
	if s.SQS.Region == "" {
		s.SQS.Region = DefaultSQSRegion
	} else if !regionRE.MatchString(s.SQS.Region) {
		p.addf(raw.regionNode, "sqs.region", "must be a region name of lowercase letters, digits and - such as %s, got %q", DefaultSQSRegion, s.SQS.Region)
	}
	switch {
	case raw.keyNode != nil && raw.secretNode == nil:
		p.addf(raw.keyNode, "sqs.accessKeyId", "is set without sqs.secretAccessKey; set both (every request's signature is then checked) or neither")
	case raw.keyNode == nil && raw.secretNode != nil:
		p.addf(raw.secretNode, "sqs.secretAccessKey", "is set without sqs.accessKeyId; set both (every request's signature is then checked) or neither")
	}
	if raw.listenNode != nil {
		p.checkSQSListen(raw.listenNode, s.SQS.Listen, raw.keyNode != nil && raw.secretNode != nil)
	}
}

// checkSQSListen checks sqs.listen: host:port, on a loopback address
// unless requests are signed.
func (p *parser) checkSQSListen(n *yaml.Node, listen string, signed bool) {
	const field = "sqs.listen"
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		p.addf(n, field, "must be host:port such as %s, got %q", DefaultSQSListen, listen)
		return
	}
	if !validPort(port) {
		p.addf(n, field, "port must be between 0 and 65535 (0 picks a free port), got %q", port)
	}
	if signed || strings.EqualFold(host, "localhost") {
		return
	}
	addr, err := netip.ParseAddr(host)
	if err != nil || !addr.IsLoopback() {
		p.addf(n, field, "host must be a loopback address (127.0.0.1, ::1 or localhost) unless sqs.accessKeyId and sqs.secretAccessKey are set: "+
			"the SQS API can read and change every queue; got %q", host)
	}
}
