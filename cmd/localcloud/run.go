package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// forwardedSignals are passed on to the command run starts.
var forwardedSignals = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
}

// runCommand runs a command with the app environment of a stack.
type runCommand struct {
	app *app
}

func (c *runCommand) flags() (*flag.FlagSet, *string) {
	fs := newFlagSet("run")
	return fs, stackFlag(fs)
}

func (c *runCommand) Run(ctx context.Context, args []string) error {
	fs, file := c.flags()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return &usageError{msg: "run needs a command to run", try: "localcloud run -f stack.yaml -- CMD ARGS..."}
	}
	vars, err := c.app.stackEnv(*file, "run")
	if err != nil {
		return err
	}
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Env = c.app.environ()
	for _, v := range vars {
		cmd.Env = append(cmd.Env, v.String()) // later entries win
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.app.stdin, c.app.stdout, c.app.stderr

	sigs := make(chan os.Signal, 8)
	c.app.notify(sigs, forwardedSignals...)
	defer c.app.stopNotify(sigs)
	if err := cmd.Start(); err != nil {
		return &hintError{err: fmt.Errorf("start %s: %w", fs.Arg(0), err), try: "check the command name and your PATH"}
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		select {
		case sig := <-sigs:
			// The child may already be gone; Wait reports how it ended.
			_ = cmd.Process.Signal(sig)
		case err := <-waited:
			return childExit(err)
		}
	}
}

// childExit turns the command's end into run's exit: its code, or 128+N
// when signal N killed it, as shells report it.
func childExit(err error) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("wait for command: %w", err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return &exitCodeError{code: 128 + int(ws.Signal())}
	}
	return &exitCodeError{code: ee.ExitCode()}
}

func (c *runCommand) Usage() {
	fs, _ := c.flags()
	fmt.Fprint(c.app.stdout, `Run a command with the environment "localcloud env" prints.

Usage:
  localcloud run [-f FILE] -- CMD [ARGS...]

CMD gets this process's environment plus LOCALCLOUD_STACK_NAME,
LOCALCLOUD_NATS_URL and LOCALCLOUD_BINDING_<NAME> (see localcloud env -h).
SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are passed on to it,
and run exits with its exit code (128+N when signal N killed it). run exits 1
when CMD cannot be started.

Flags:
`)
	printDefaults(c.app.stdout, fs)
}
