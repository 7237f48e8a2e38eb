package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/localcloud/localcloud/internal/hintserver"
	"os"
	"path/filepath"
	"runtime/trace"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/supervisor"
)

// shutdownTimeout bounds a graceful stop, so up exits within 5 s of the
// first signal.
const shutdownTimeout = 4500 * time.Millisecond

// sameSignalWindow: a stop signal equal to the first within this time is
// the same one delivered twice (timeout N localcloud up sends SIGTERM to
// up and then to its process group), not a second Ctrl-C.
const sameSignalWindow = 100 * time.Millisecond

// readyMsg is the message of the log line that says up is serving. Scripts
// wait for a stderr line containing "msg=ready".
const readyMsg = "ready"

// upCommand provisions a stack and serves it until a signal.
type upCommand struct {
	app *app
}

func (c *upCommand) flags() (fs *flag.FlagSet, file *string, verbose *bool) {
	fs = newFlagSet("up")
	file = stackFlag(fs)
	verbose = fs.Bool("v", false, "log debug lines, including the embedded NATS server's")
	return fs, file, verbose
}

func (c *upCommand) Run(ctx context.Context, args []string) error {
	fs, file, verbose := c.flags()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	stopProfile := c.app.startUpProfile()
	defer func() { stopProfile() }() // when the start fails
	// Listen before anything else, so a signal during the start is not lost
	// (it is handled once the start returns).
	sigs := make(chan os.Signal, 8)
	c.app.notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer c.app.stopNotify(sigs)

	r := trace.StartRegion(ctx, "load stack")
	st, err := c.app.loadStack(*file)
	r.End()
	if err != nil {
		return err
	}
	log, natsLog := c.app.loggers(*verbose)
	r = trace.StartRegion(ctx, "explorer listen")
	exp, err := listenExplorer(st)
	r.End()
	if err != nil {
		return err
	}
	if exp != nil && exp.fellBack {
		// The same policy and words as the NATS port's (supervisor.Start).
		log.Warn("the default explorer port is taken; using a free port instead (set explorer.listen to choose one)",
			"default", st.Explorer.Listen, "explorer", exp.url())
	}
	sqs, err := listenSQS(st)
	if err != nil {
		exp.abort()
		return err
	}
	if sqs != nil && sqs.fellBack {
		log.Warn("the default SQS port is taken; using a free port instead (set sqs.listen to choose one)",
			"default", st.SQS.Listen, "sqs", sqs.endpoint())
	}
	r = trace.StartRegion(ctx, "supervisor start")
	sup, err := supervisor.Start(ctx, st, supervisor.Options{
		Logger:      log,
		NATSLogger:  natsLog,
		LoadOptions: c.app.loadOptions(),
		ExplorerURL: exp.url(),
		SQSEndpoint: sqs.endpoint(),
	})
	r.End()
	if err != nil {
		exp.abort()
		sqs.abort()
		return startError(err, st)
	}
	r = trace.StartRegion(ctx, "explorer serve")
	err = exp.serve(sup, st, log)
	r.End()
	if err != nil {
		sqs.abort()
		_ = sup.Close()
		return err
	}
	r = trace.StartRegion(ctx, "sqs serve")
	err = sqs.serve(sup, st, log)
	r.End()
	if err != nil {
		exp.close(shutdownTimeout / 4)
		_ = sup.Close()
		return err
	}
	r = trace.StartRegion(ctx, "summary")
	c.printSummary(sup, st, exp, sqs)
	r.End()
	attrs := []any{"nats", sup.URL()}
	if exp != nil {
		attrs = append(attrs, "explorer", exp.url())
	}
	if sqs != nil {
		attrs = append(attrs, "sqs", sqs.endpoint())
	}
	log.Info(readyMsg, append(attrs, "stack", st.Name, "bindings", len(st.Bindings), "pid", os.Getpid())...)
	stopProfile()
	stopProfile = func() {}

	var stopCause any
	var stopSig os.Signal
	var stopAt time.Time
	for stopCause == nil {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				_, _ = sup.Reload(ctx, "SIGHUP")
				continue
			}
			stopCause, stopSig, stopAt = sig, sig, time.Now()
		case <-ctx.Done():
			stopCause = "context done"
		}
	}
	log.Info("stopping", "cause", fmt.Sprint(stopCause))
	done := make(chan error, 1)
	go func() {
		exp.close(shutdownTimeout / 4) // before the stores it reads
		sqs.close(shutdownTimeout / 4)
		done <- sup.Close()
	}()
	timer := time.NewTimer(shutdownTimeout)
	defer timer.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("stop: %w", err)
			}
			log.Info("stopped")
			return nil
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				continue
			}
			if sig == stopSig && time.Since(stopAt) < sameSignalWindow {
				// One signal delivered twice (timeout(1) signals the
				// command and then its process group): still the first.
				log.Debug("the same signal again at once; counted as one", "signal", sig.String())
				continue
			}
			log.Warn("second signal; exiting at once", "signal", sig.String())
			c.app.exit(exitFailure)
			return &exitCodeError{code: exitFailure} // reached only when exit is a test double
		case <-timer.C:
			return fmt.Errorf("stop: still busy after %s; exiting without a clean stop", shutdownTimeout)
		}
	}
}

// startError adds a hint to the failures a user can fix.
func startError(err error, st *config.Stack) error {
	var le *supervisor.LockedError
	switch {
	case errors.As(err, &le):
		holder, try := "another localcloud up", "stop the other localcloud up first (localcloud status shows it)"
		if le.PID > 0 {
			holder = fmt.Sprintf("another localcloud up (pid %d)", le.PID)
			try = fmt.Sprintf("stop the other localcloud up first (kill %d), or give this stack another dataDir", le.PID)
		}
		return &hintError{err: fmt.Errorf("%s already serves %s; it holds %s", holder, st.DataDir, le.Path), try: try}
	case errors.Is(err, hintserver.ErrAddrInUse):
		return &hintError{err: err, try: fmt.Sprintf("set \"listen: 127.0.0.1:0\" under notify: in %s to pick a free port", st.File)}
	}
	return &hintError{err: err, try: "fix the problem above; nothing was changed in existing stores"}
}

// jetStreamSummary says where the stack's jetstream bindings live: the
// embedded server (its store and sync) or the stack's cluster; "" when the
// stack has none.
func jetStreamSummary(sup *supervisor.Supervisor, st *config.Stack) string {
	switch {
	case st.JetStream.External():
		return "cluster " + strings.Join(st.JetStream.Servers, ", ") + " (its own sync_interval governs durability)"
	case !st.UsesJetStream():
		return ""
	}
	_, always := sup.JetStream()
	sync := "lazy sync, every 2m"
	if always {
		sync = "sync every write (durability full)"
	}
	return fmt.Sprintf("on the embedded server, store %s, %s", filepath.Join(st.DataDir, supervisor.JetStreamDir), sync)
}

// printSummary prints what up serves to stdout.
func (c *upCommand) printSummary(sup *supervisor.Supervisor, st *config.Stack, exp *upExplorer, sqs *upSQS) {
	w := c.app.stdout
	fmt.Fprintf(w, "localcloud up: stack %s (%s)\n", st.Name, st.File)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  data dir\t%s\n", st.DataDir)
	fmt.Fprintf(tw, "  runtime file\t%s\n", filepath.Join(st.DataDir, supervisor.RuntimeFileName))
	nats := fmt.Sprintf("%s (hints on %s)", sup.URL(), config.Subject(st.Name, "<binding>"))
	if !st.Notify.ListenGiven && !strings.HasSuffix(sup.URL(), "//"+st.Notify.Listen) {
		nats += fmt.Sprintf(" (%s was taken, so a free port was picked; set notify.listen to choose one)", st.Notify.Listen)
	}
	fmt.Fprintf(tw, "  NATS\t%s\n", nats)
	if js := jetStreamSummary(sup, st); js != "" {
		fmt.Fprintf(tw, "  JetStream\t%s\n", js)
	}
	fmt.Fprintf(tw, "  explorer\t%s\n", exp.summary(st))
	fmt.Fprintf(tw, "  SQS API\t%s\n", sqs.summary(st))
	tw.Flush()
	fmt.Fprintf(w, "bindings (%d):\n", len(st.Bindings))
	printBindings(w, st)
	fmt.Fprintf(w, "defaults applied: %s\n", defaultsApplied(st))
	fmt.Fprintf(w, "health check: every %s\n", supervisor.DefaultHealthInterval)
	fmt.Fprintf(w, "apps: localcloud run -f %s -- CMD, or eval \"$(localcloud env -f %s)\"\n", st.File, st.File)
	fmt.Fprintln(w, "reload: save the stack file or send SIGHUP; stop: Ctrl-C or SIGTERM")
}

// defaultsApplied describes the defaults the stack file left in force
// (config.Stack.Defaulted), binding settings grouped by value:
// "dataDir .localcloud; visibilityTimeout 30s (emails, orders)", or "none".
func defaultsApplied(st *config.Stack) string {
	var parts []string
	per := map[string][]string{} // binding setting -> binding names
	var order []string
	for _, d := range st.Defaulted {
		switch d {
		case "dataDir":
			parts = append(parts, "dataDir "+config.DefaultDataDir)
			continue
		case "notify.listen":
			parts = append(parts, "notify.listen "+st.Notify.Listen+" (the stack's own default port)")
			continue
		case "explorer.listen":
			parts = append(parts, "explorer.listen "+config.DefaultExplorerListen)
			continue
		case "sqs.listen":
			parts = append(parts, "sqs.listen "+config.DefaultSQSListen)
			continue
		}
		rest, ok := strings.CutPrefix(d, "bindings.")
		i := strings.LastIndexByte(rest, '.')
		if !ok || i < 0 {
			parts = append(parts, d)
			continue
		}
		name, field := rest[:i], rest[i+1:]
		switch field {
		case "visibilityTimeout":
			field += " " + config.DefaultVisibilityTimeout.String()
		case "durability":
			field += " " + config.DefaultDurability
		case "path":
			field = "path <dataDir>/<type>/<name>"
		}
		if _, seen := per[field]; !seen {
			order = append(order, field)
		}
		per[field] = append(per[field], name)
	}
	for _, f := range order {
		names := per[f]
		sort.Strings(names)
		parts = append(parts, fmt.Sprintf("%s (%s)", f, strings.Join(names, ", ")))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

func (c *upCommand) Usage() {
	fs, _, _ := c.flags()
	fmt.Fprint(c.app.stdout, `Provision a stack's stores and serve them until stopped.

Usage:
  localcloud up [-f FILE] [-v]

up checks the stack file, takes <dataDir>/.lock (a second up on the same
data dir fails naming the first one's pid), creates the data dir and every
binding's store (directories 0700, files 0600; a store of another format
stops up and is left untouched), starts the embedded NATS hint server and
writes <dataDir>/runtime.json, and serves the web explorer (stack field
explorer; default http://127.0.0.1:4280/, a free port when that one is
taken and the stack sets none; "explorer: off" turns it off), and, with a
queue binding, the SQS API for AWS SDKs (stack field sqs; default
http://127.0.0.1:9324, a free port when that one is taken and the stack sets
none; "sqs: off" turns it off). It prints a summary on stdout and then logs,
on stderr, one line with msg=ready that scripts can wait for:

  time=... level=INFO msg=ready nats=nats://127.0.0.1:PORT explorer=URL sqs=URL stack=NAME bindings=N pid=PID

While up runs, saving the stack file (or SIGHUP) applies the change: new
bindings are provisioned, removed ones no longer served (their files stay),
changed settings applied; a file with mistakes is logged and the last good
stack kept. Every second up checks that no store directory or file was
deleted, replaced or loosened, logs it and shows it in status; it never
recreates one.

SIGINT or SIGTERM stops up cleanly (exit 0, within 5 s); the same signal
again within 100 ms counts as one (timeout(1) sends its SIGTERM twice); a
second one later exits
at once. A NATS port that is taken fails the start before anything is
created.

Examples:
  localcloud up
  localcloud up -f examples/stack.yaml -v

Flags:
`)
	printDefaults(c.app.stdout, fs)
}
