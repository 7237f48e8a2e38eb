package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/cmd/localcloud/internal/sqsapi"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/listen"
	"github.com/localcloud/localcloud/internal/supervisor"
)

// The variables env and run export for AWS SDKs. The endpoint always; the
// region and keys only where the environment lacks them.
const (
	envAWSEndpointSQS   = "AWS_ENDPOINT_URL_SQS"
	envAWSRegion        = "AWS_REGION"
	envAWSDefaultRegion = "AWS_DEFAULT_REGION"
	envAWSAccessKeyID   = "AWS_ACCESS_KEY_ID"
	envAWSSecretKey     = "AWS_SECRET_ACCESS_KEY"
)

// placeholderKey is the access key and secret env and run export for a
// stack without sqs keys, where the environment has none: SDKs refuse to
// send a request without credentials, and up accepts any then.
const placeholderKey = "localcloud"

// upSQS is up's SQS API: listening before the supervisor starts (so
// runtime.json can carry its endpoint), serving once it runs. A nil
// *upSQS is the API turned off; every method is safe on it.
type upSQS struct {
	ln       net.Listener
	fellBack bool
	srv      *sqsapi.Server
	nc       *nats.Conn
}

// listenSQS opens the SQS API's listener as the stack asks: nil when it is
// off or the stack has no queue; a free port when the default one is
// taken and the stack did not set one.
func listenSQS(st *config.Stack) (*upSQS, error) {
	if !st.SQS.Enabled {
		return nil, nil
	}
	ln, fellBack, err := listen.TCP("the SQS API", st.SQS.Listen, !st.SQS.ListenGiven)
	if errors.Is(err, listen.ErrAddrInUse) {
		return nil, &hintError{err: fmt.Errorf("sqs.listen: %s is taken by another program", st.SQS.Listen),
			try: fmt.Sprintf("set \"listen: 127.0.0.1:0\" under sqs: in %s to pick a free port, or \"sqs: off\"", st.File)}
	}
	if err != nil {
		return nil, &hintError{err: err, try: fmt.Sprintf("set another sqs.listen in %s, or \"sqs: off\"", st.File)}
	}
	return &upSQS{ln: ln, fellBack: fellBack}, nil
}

func (q *upSQS) endpoint() string {
	if q == nil {
		return ""
	}
	return sqsapi.Endpoint(q.ln.Addr())
}

// summary is the SQS API's line of up's summary.
func (q *upSQS) summary(st *config.Stack) string {
	if q == nil {
		if !st.SQS.Enabled && len(st.Bindings) > 0 {
			for _, b := range st.Bindings {
				if b.Type == config.TypeQueue {
					return "off (sqs: off in the stack file)"
				}
			}
		}
		return "off (no queue binding)"
	}
	s := q.endpoint() + " (region " + st.SQS.Region
	if st.SQS.AccessKeyID != "" {
		s += ", signatures checked"
	}
	s += ")"
	if q.fellBack {
		s += fmt.Sprintf(" (%s was taken, so a free port was picked; set sqs.listen to choose one)", st.SQS.Listen)
	}
	return s
}

func (q *upSQS) abort() {
	if q != nil {
		_ = q.ln.Close()
	}
}

// serve starts the API on the running supervisor.
func (q *upSQS) serve(sup *supervisor.Supervisor, st *config.Stack, log *slog.Logger) error {
	if q == nil {
		return nil
	}
	nc, err := sup.Connect()
	if err != nil {
		log.Warn("sqs: long polls wake on this process's sends and a poll only", "err", err)
		nc = nil
	}
	srv, err := sqsapi.New(sqsapi.Options{Source: sup, Endpoint: q.endpoint(), Region: st.SQS.Region,
		AccessKeyID: st.SQS.AccessKeyID, SecretAccessKey: st.SQS.SecretAccessKey, Conn: nc,
		Logger: log.With("component", "sqs")})
	if err != nil {
		if nc != nil {
			nc.Close()
		}
		q.abort()
		return err
	}
	q.srv, q.nc = srv, nc
	srv.Serve(q.ln)
	return nil
}

// close stops the API within d; long polls answer at once.
func (q *upSQS) close(d time.Duration) {
	if q == nil || q.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = q.srv.Close(ctx)
	if q.nc != nil {
		q.nc.Close()
	}
}

// sqsEnv returns the variables AWS SDKs need for the stack's SQS API: the
// endpoint (from runtime.json while up runs, else sqs.listen unless its
// port is 0), and the region and keys where lookup finds none set.
func sqsEnv(st *config.Stack, lookup func(string) (string, bool)) ([]envVar, error) {
	if !st.SQS.Enabled {
		return nil, nil
	}
	rt, running, err := supervisor.Probe(st.DataDir)
	if err != nil {
		return nil, err
	}
	endpoint := ""
	switch {
	case running && rt != nil:
		endpoint = rt.SQSEndpoint
	case !running:
		if _, port, _ := net.SplitHostPort(st.SQS.Listen); port != "0" {
			endpoint = "http://" + st.SQS.Listen
		}
	}
	var vars []envVar
	if endpoint != "" {
		vars = append(vars, envVar{Name: envAWSEndpointSQS, Value: endpoint})
	}
	key, secret := st.SQS.AccessKeyID, st.SQS.SecretAccessKey
	if key == "" {
		key, secret = placeholderKey, placeholderKey
	}
	for _, v := range []envVar{{Name: envAWSRegion, Value: st.SQS.Region}, {Name: envAWSDefaultRegion, Value: st.SQS.Region},
		{Name: envAWSAccessKeyID, Value: key}, {Name: envAWSSecretKey, Value: secret}} {
		if cur, set := lookup(v.Name); !set || cur == "" {
			vars = append(vars, v)
		}
	}
	return vars, nil
}
