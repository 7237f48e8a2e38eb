package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/supervisor"
)

// countTimeout bounds the count queries on one store.
const countTimeout = 2 * time.Second

// statusCommand shows whether up runs and the state of each binding.
type statusCommand struct {
	app *app
}

func (c *statusCommand) flags() (fs *flag.FlagSet, file *string, asJSON *bool) {
	fs = newFlagSet("status")
	file = stackFlag(fs)
	asJSON = fs.Bool("json", false, "print one JSON object instead of a table")
	return fs, file, asJSON
}

// statusReport is what status prints; its JSON form is the --json output.
type statusReport struct {
	Running       bool       `json:"running"`
	PID           int        `json:"pid,omitempty"`
	NATSURL       string     `json:"natsUrl,omitempty"`
	ExplorerURL   string     `json:"explorerUrl,omitempty"`
	SQSEndpoint   string     `json:"sqsEndpoint,omitempty"`
	StartedAt     *time.Time `json:"startedAt,omitempty"`
	UptimeSeconds int64      `json:"uptimeSeconds,omitempty"`
	Stack         string     `json:"stack"`
	StackFile     string     `json:"stackFile"`
	DataDir       string     `json:"dataDir"`
	// Health is the owner lock's: a kind (supervisor.Kind*), with the
	// message in HealthMessage when it is not ok. Only while up runs.
	Health          string          `json:"health,omitempty"`
	HealthMessage   string          `json:"healthMessage,omitempty"`
	LastReloadError string          `json:"lastReloadError,omitempty"`
	Bindings        []statusBinding `json:"bindings"`
}

type statusBinding struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
	// Engine is "jetstream" for a jetstream binding, with its Stream
	// (Path is then ""); absent for a sqlite binding.
	Engine string `json:"engine,omitempty"`
	Stream string `json:"stream,omitempty"`
	// Replicas is a jetstream binding's replica count.
	Replicas int    `json:"replicas,omitempty"`
	Subject  string `json:"subject,omitempty"`
	// CreatedBySQS marks a queue the SQS API created (CreateQueue).
	CreatedBySQS bool `json:"createdBySqs,omitempty"`
	// SQSName is the name the SQS API shows the queue under, when it is
	// not Name (an SQS name that is no binding name).
	SQSName string `json:"sqsName,omitempty"`
	// Health is ok, missing, replaced, truncated, loose-modes,
	// not-provisioned, error or problem (supervisor.HealthKind);
	// HealthMessage says what exactly, absent when ok.
	Health        string       `json:"health"`
	HealthMessage string       `json:"healthMessage,omitempty"`
	KV            *kvCounts    `json:"kv,omitempty"`
	Queue         *queueCounts `json:"queue,omitempty"`
	// CountError says why the counts are missing.
	CountError string `json:"countError,omitempty"`
	// where says where the store is, for the table.
	where string
}

type kvCounts struct {
	Live    int64 `json:"live"`
	Expired int64 `json:"expired"`
}

type queueCounts struct {
	Due int64 `json:"due"`
	// InFlight counts the leased messages (received, not acked); Delayed
	// the ones sent with a delay not passed yet (queue.Stats.Leased).
	InFlight int64 `json:"inFlight"`
	Delayed  int64 `json:"delayed"`
	// OldestAgeMillis is the age of the oldest message; 0 when empty.
	OldestAgeMillis int64 `json:"oldestAgeMillis"`
}

func (c *statusCommand) Run(ctx context.Context, args []string) error {
	fs, file, asJSON := c.flags()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	var rep *statusReport
	st, err := c.app.loadStack(*file)
	if err == nil {
		rep, err = buildStatus(ctx, st, st.DataDir, time.Now())
	} else {
		// An edit in progress must not hide a running up: find its data
		// dir without the full checks and report what up serves.
		var ce *config.Errors
		dataDir, ok := fallbackDataDir(c.app.stackPath(*file))
		if !errors.As(err, &ce) || !ok {
			return err
		}
		rep, _ = buildStatus(ctx, nil, dataDir, time.Now())
		if rep == nil || !rep.Running || rep.PID == 0 {
			return err
		}
		fmt.Fprintf(c.app.stderr, "localcloud status: the stack file has %d problem(s) (localcloud validate lists them); showing what up serves\n", len(ce.Problems))
		err = nil
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(c.app.stdout)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printStatus(c.app.stdout, rep, time.Now())
	}
	return statusExit(c.app, rep)
}

// statusExit is status's exit: 1, with the reason on stderr, when up is not
// running or not every binding (or up's lock file) is healthy.
func statusExit(a *app, rep *statusReport) error {
	var reasons, bad []string
	if !rep.Running {
		reasons = append(reasons, "localcloud up is not running")
	}
	if rep.Health != "" && rep.Health != supervisor.KindOK {
		reasons = append(reasons, "the owner lock file is "+rep.Health)
	}
	for _, b := range rep.Bindings {
		if b.Health != supervisor.KindOK {
			bad = append(bad, b.Name+" ("+b.Health+")")
		}
	}
	if len(bad) > 0 && rep.Running {
		reasons = append(reasons, fmt.Sprintf("%s not healthy: %s", quantity(len(bad), "binding"), strings.Join(bad, ", ")))
	}
	if len(reasons) == 0 {
		return nil
	}
	fmt.Fprintf(a.stderr, "localcloud status: exit 1: %s\n", strings.Join(reasons, "; "))
	return &exitCodeError{code: exitFailure}
}

// setHealth splits a health message into its kind and the message.
func setHealth(kind, msg *string, health string) {
	*kind = supervisor.HealthKind(health)
	if *kind != supervisor.KindOK {
		*msg = health
	}
}

// buildStatus gathers the report: from runtime.json while up runs (its
// bindings and their health), from the stack file otherwise; counts from
// each store opened read-only.
//
// st may be nil when the stack file cannot be read; then only a running up
// gives a report.
func buildStatus(ctx context.Context, st *config.Stack, dataDir string, now time.Time) (*statusReport, error) {
	rt, running, err := supervisor.Probe(dataDir)
	if err != nil {
		return nil, err
	}
	rep := &statusReport{Running: running, DataDir: dataDir}
	if st != nil {
		rep.Stack, rep.StackFile = st.Name, st.File
	}
	env := engineEnv(st)
	defer env.Close()
	switch {
	case rt == nil && st == nil:
		return rep, nil
	case rt != nil:
		started := rt.StartedAt
		rep.PID, rep.NATSURL, rep.StartedAt = rt.PID, rt.NATSURL, &started
		rep.ExplorerURL, rep.SQSEndpoint = rt.ExplorerURL, rt.SQSEndpoint
		rep.UptimeSeconds = int64(now.Sub(started).Seconds())
		rep.Stack, rep.StackFile, rep.LastReloadError = rt.Stack, rt.StackFile, rt.LastReloadError
		setHealth(&rep.Health, &rep.HealthMessage, rt.Health)
		for _, b := range rt.Bindings {
			sb := statusBinding{Name: b.Name, Type: b.Type, Path: b.Path, Subject: b.Subject, Stream: b.Stream, Replicas: b.Replicas, CreatedBySQS: b.CreatedBySQS, SQSName: b.SQSName}
			if b.Engine != config.DefaultEngine {
				sb.Engine = b.Engine
			}
			setHealth(&sb.Health, &sb.HealthMessage, b.Health)
			rep.Bindings = append(rep.Bindings, sb)
		}
	default:
		for _, b := range st.Bindings {
			sb := statusBinding{Name: b.Name, Type: string(b.Type), Path: b.Path, CreatedBySQS: b.Created, SQSName: b.SQS.Name}
			t, err := toolsOf(b)
			if err != nil {
				return nil, err
			}
			if b.Engine != config.DefaultEngine {
				sb.Engine = b.Engine
			}
			p := t.Place(b)
			sb.Stream, sb.Replicas = p.Stream, p.Replicas
			if b.Type == config.TypeQueue && t.Traits().Hints {
				sb.Subject = config.Subject(st.Name, b.Name)
			}
			setHealth(&sb.Health, &sb.HealthMessage, t.Health(ctx, env, b))
			rep.Bindings = append(rep.Bindings, sb)
		}
	}
	for i := range rep.Bindings {
		countStore(ctx, env, &rep.Bindings[i], now)
	}
	return rep, nil
}

// bindingOf is the binding sb reports: the stack file's, or, when the
// file does not describe it (an edit in progress), what up published.
func bindingOf(st *config.Stack, sb statusBinding) config.Binding {
	if b, ok := st.Binding(sb.Name); ok && b.Path == sb.Path {
		return *b
	}
	b := config.Binding{Name: sb.Name, Type: config.Type(sb.Type), Engine: sb.Engine, Path: sb.Path, Replicas: sb.Replicas}
	if b.Engine == "" {
		b.Engine = config.DefaultEngine
	}
	return b
}

// countStore fills in a binding's counts and where it is, opening its
// store read-only through its engine. A store that does not exist is not
// opened (it is not created either way).
func countStore(ctx context.Context, env *engine.Env, sb *statusBinding, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, countTimeout)
	defer cancel()
	b := bindingOf(env.Stack, *sb)
	t, err := toolsOf(b)
	if err != nil {
		sb.CountError = err.Error()
		return
	}
	sb.where = t.Where(b)
	if p := t.Place(b); p.Replicas > 0 {
		sb.where += fmt.Sprintf(" (%d replica(s))", p.Replicas)
	}
	if ok, err := t.Exists(ctx, env, b); err != nil || !ok {
		if err != nil {
			sb.CountError = err.Error()
		}
		return
	}
	h, err := t.Open(ctx, env, b, engine.Read)
	if err != nil {
		sb.CountError = err.Error()
		return
	}
	defer h.Close()
	switch {
	case h.KV() != nil:
		kst, err := h.KV().Stats(ctx)
		if err != nil {
			sb.CountError = fmt.Sprintf("count keys: %v", err)
			return
		}
		sb.KV = &kvCounts{Live: kst.Live, Expired: kst.Expired}
	case h.Queue() != nil:
		// The queue's own Stats: the engine owns the schema.
		qst, err := h.Queue().Stats(ctx)
		if err != nil {
			sb.CountError = fmt.Sprintf("count messages: %v", err)
			return
		}
		c := queueCounts{Due: qst.Due, InFlight: qst.Leased(), Delayed: qst.Delayed}
		if ms := now.UnixMilli(); !qst.Oldest.IsZero() && qst.Oldest.UnixMilli() < ms {
			c.OldestAgeMillis = ms - qst.Oldest.UnixMilli()
		}
		sb.Queue = &c
	}
}

// fallbackDataDir finds the data dir of a stack file that does not pass
// the checks: its dataDir field if it is a plain string, else the default,
// relative to the file's folder. ok is false when dataDir uses ${NAME},
// which only a valid file resolves.
func fallbackDataDir(path string) (dir string, ok bool) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", false
	}
	var top struct {
		DataDir any `yaml:"dataDir"`
	}
	data, err := config.ReadFile(abs) // never blocks on a FIFO
	if err != nil {
		return "", false
	}
	_ = yaml.Unmarshal(data, &top) // a broken file keeps the default
	d, isString := top.DataDir.(string)
	switch {
	case top.DataDir == nil || (isString && d == ""):
		d = config.DefaultDataDir
	case !isString || strings.Contains(d, "$"):
		return "", false
	}
	if !filepath.IsAbs(d) {
		d = filepath.Join(filepath.Dir(abs), d)
	}
	return filepath.Clean(d), true
}

func printStatus(w interface{ Write([]byte) (int, error) }, rep *statusReport, now time.Time) {
	switch {
	case rep.Running && rep.PID > 0:
		up := time.Duration(rep.UptimeSeconds) * time.Second
		fmt.Fprintf(w, "up: running, pid %d, up %s, NATS %s\n", rep.PID, up, rep.NATSURL)
		if rep.ExplorerURL != "" {
			fmt.Fprintf(w, "explorer: %s\n", rep.ExplorerURL)
		}
		if rep.SQSEndpoint != "" {
			fmt.Fprintf(w, "SQS API: %s\n", rep.SQSEndpoint)
		}
	case rep.Running:
		fmt.Fprintln(w, "up: starting")
	default:
		fmt.Fprintf(w, "up: not running (start it with: localcloud up -f %s)\n", rep.StackFile)
	}
	fmt.Fprintf(w, "stack: %s (%s), data dir %s\n", rep.Stack, rep.StackFile, rep.DataDir)
	if rep.Health != "" && rep.Health != supervisor.KindOK {
		fmt.Fprintf(w, "problem: %s\n", rep.HealthMessage)
	}
	if rep.LastReloadError != "" {
		fmt.Fprintln(w, "stack file: the last edit was not applied; up serves the last good stack:")
		for _, l := range strings.Split(rep.LastReloadError, "\n") {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTYPE\tHEALTH\tCONTENTS\tPATH")
	for _, b := range rep.Bindings {
		health := b.Health
		if b.HealthMessage != "" {
			health = b.HealthMessage
		}
		path := b.where
		if path == "" {
			path = b.Path
		}
		typ := b.Type
		switch {
		case b.SQSName != "":
			typ += " (SQS " + b.SQSName + ")" // created through the SQS API under that name
		case b.CreatedBySQS:
			typ += " (SQS)" // created through the SQS API
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", b.Name, typ, health, contents(b), path)
	}
	tw.Flush()
	for _, b := range rep.Bindings {
		if b.Health != supervisor.KindOK && rep.Running {
			fmt.Fprintf(w, "\n%s.\n", supervisor.HealthAdvice)
			break
		}
	}
}

func contents(b statusBinding) string {
	switch {
	case b.KV != nil:
		return fmt.Sprintf("%s, %d expired", quantity(b.KV.Live, "live key"), b.KV.Expired)
	case b.Queue != nil:
		s := fmt.Sprintf("%d due, %d in flight, %d delayed", b.Queue.Due, b.Queue.InFlight, b.Queue.Delayed)
		if b.Queue.Due+b.Queue.InFlight+b.Queue.Delayed > 0 {
			s += ", oldest " + (time.Duration(b.Queue.OldestAgeMillis) * time.Millisecond).Truncate(time.Second).String()
		}
		return s
	case b.CountError != "":
		return "unknown: " + b.CountError
	}
	return "-"
}

func (c *statusCommand) Usage() {
	fs, _, _ := c.flags()
	fmt.Fprint(c.app.stdout, `Show whether up runs and the state of each binding.

Usage:
  localcloud status [-f FILE] [--json]

Shows whether localcloud up serves the stack's data dir (pid, NATS URL,
explorer URL, uptime) and per binding its type, health, path and contents: live and
expired keys of a KV store; due and in-flight messages and the age of the
oldest message of a queue. The stores are opened read-only. While up runs
the bindings and their health are the ones up serves; otherwise the stack
file's. A queue's health also names the unfinished moves out of it that
up leaves in place, since the stack does not name their destination (see
localcloud check).

status exits 1 (saying why on stderr) when up is not running or any binding
is not healthy, so scripts can wait with: until localcloud status; do sleep 1; done.
In --json, each health is one of ok, missing, replaced, truncated,
loose-modes, not-provisioned, error, problem, with healthMessage saying what.

Examples:
  localcloud status
  localcloud status -f examples/stack.yaml --json

Flags:
`)
	printDefaults(c.app.stdout, fs)
}
