package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/localcloud/localcloud/internal/asyncapi"
	"log/slog"
	"net"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/cmd/localcloud/internal/explorer"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/listen"
	"github.com/localcloud/localcloud/internal/supervisor"
)

// upExplorer is up's web explorer: listening before the supervisor starts
// (so runtime.json can carry its URL), serving once it runs. A nil
// *upExplorer is an explorer turned off; every method is safe on it.
type upExplorer struct {
	ln       net.Listener
	fellBack bool // the default port was taken; ln is on a free one
	srv      *explorer.Server
	nc       *nats.Conn
}

// listenExplorer opens the explorer's listener as the stack asks: nil when
// it is off; a free port when the default one is taken and the stack did
// not set one; an error with a Try when a port the stack set is taken.
func listenExplorer(st *config.Stack) (*upExplorer, error) {
	if !st.Explorer.Enabled {
		return nil, nil
	}
	ln, fellBack, err := listen.TCP("the explorer", st.Explorer.Listen, !st.Explorer.ListenGiven)
	if errors.Is(err, listen.ErrAddrInUse) {
		return nil, &hintError{err: fmt.Errorf("explorer.listen: %s is taken by another program", st.Explorer.Listen),
			try: fmt.Sprintf("set \"listen: 127.0.0.1:0\" under explorer: in %s to pick a free port, or \"explorer: off\"", st.File)}
	}
	if err != nil {
		return nil, &hintError{err: err, try: fmt.Sprintf("set another explorer.listen in %s, or \"explorer: off\"", st.File)}
	}
	return &upExplorer{ln: ln, fellBack: fellBack}, nil
}

func (e *upExplorer) url() string {
	if e == nil {
		return ""
	}
	return explorer.URL(e.ln.Addr())
}

// summary is the explorer's line of up's summary.
func (e *upExplorer) summary(st *config.Stack) string {
	if e == nil {
		return "off (explorer: off in the stack file)"
	}
	s := e.url()
	if e.fellBack {
		s += fmt.Sprintf(" (%s was taken, so a free port was picked; set explorer.listen to choose one)", st.Explorer.Listen)
	}
	if st.Explorer.ReadOnly {
		s += " read-only"
	}
	return s
}

// abort closes the listener of an explorer that never served.
func (e *upExplorer) abort() {
	if e != nil {
		_ = e.ln.Close()
	}
}

// serve starts the explorer on the running supervisor.
func (e *upExplorer) serve(sup *supervisor.Supervisor, st *config.Stack, log *slog.Logger) error {
	if e == nil {
		return nil
	}
	nc, err := sup.Connect()
	if err != nil {
		log.Warn("explorer: no hints in its live feed", "err", err)
		nc = nil
	}
	srv, err := explorer.New(e.ln.Addr().String(), explorer.Options{
		Source:   sup,
		Conn:     nc,
		ReadOnly: st.Explorer.ReadOnly,
		Token:    st.Notify.Token,
		AsyncAPI: func() ([]byte, error) { return asyncapi.Generate(asyncAPIInput(sup.Stack(), asyncapi.FormatJSON)) },
		Env:      func() ([]explorer.EnvVar, error) { return explorerEnv(sup.Stack()) },
		Logger:   log.With("component", "explorer"),
	})
	if err != nil {
		if nc != nil {
			nc.Close()
		}
		e.abort()
		return err
	}
	e.srv, e.nc = srv, nc
	srv.Serve(e.ln)
	return nil
}

// explorerEnv is the app environment, with the NATS token marked secret.
func explorerEnv(st *config.Stack) ([]explorer.EnvVar, error) {
	vars, _, err := appEnv(st)
	if err != nil {
		return nil, err
	}
	out := make([]explorer.EnvVar, 0, len(vars))
	for _, v := range vars {
		out = append(out, explorer.EnvVar{Name: v.Name, Value: v.Value, Secret: v.Name == envNATSToken})
	}
	return out, nil
}

// close stops the explorer within d.
func (e *upExplorer) close(d time.Duration) {
	if e == nil || e.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = e.srv.Close(ctx)
	if e.nc != nil {
		e.nc.Close()
	}
}
