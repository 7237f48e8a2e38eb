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
	vars, err := c.app.stackEnv(ctx, *file, "run")
	if err != nil {
		return err
	}
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Env = c.app.environ()
	for _, v := range vars {
		cmd.Env = append(cmd.Env, v.String()) // later entries win
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.app.stdin, c.app.stdout, c.app.stderr
	// Its own process group, so a forwarded signal reaches its children too
	// (go run's compiled program, a shell's commands), which would be
	// orphaned otherwise. With a terminal on stdin the group becomes the
	// terminal's foreground group, so Ctrl-C and job control work on it
	// and it may read the terminal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if isTTY(c.app.stdin) {
		cmd.SysProcAttr.Foreground = true
		cmd.SysProcAttr.Ctty = 0 // the child's stdin
	}

	sigs := make(chan os.Signal, 8)
	c.app.notify(sigs, forwardedSignals...)
	defer c.app.stopNotify(sigs)
	if err := cmd.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			// 127, as a shell reports a command it cannot find.
			fmt.Fprintf(c.app.stderr, "Error: command not found: %s\nTry: check the command name and your PATH\n", fs.Arg(0))
			return &exitCodeError{code: exitNotFound}
		}
		if errors.Is(err, os.ErrPermission) {
			fmt.Fprintf(c.app.stderr, "Error: cannot run %s: %v\nTry: chmod +x %s, or name the right file\n", fs.Arg(0), err, fs.Arg(0))
			return &exitCodeError{code: exitNotExecutable}
		}
		return &hintError{err: fmt.Errorf("start %s: %w", fs.Arg(0), err), try: "check the command name and your PATH"}
	}
	pgid := cmd.Process.Pid
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		select {
		case sig := <-sigs:
			// To the whole group; the child may already be gone, and Wait
			// reports how it ended.
			if s, ok := sig.(syscall.Signal); ok {
				_ = syscall.Kill(-pgid, s)
			} else {
				_ = cmd.Process.Signal(sig)
			}
		case err := <-waited:
			return childExit(err)
		}
	}
}

// exitNotFound is run's exit when the command cannot be found, as in a shell.
const exitNotFound = 127

// exitNotExecutable is run's exit when the command is not executable.
const exitNotExecutable = 126

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
When localcloud up is not running, run first creates the stack's stores
that do not exist, as up does (an app's FromEnv never creates one).
CMD runs in its own process group; SIGINT, SIGTERM, SIGHUP, SIGQUIT,
SIGUSR1 and SIGUSR2 are passed on to the whole group, so the children of CMD
(the program "go run" builds, say) get them too. run exits with CMD's exit
code (128+N when signal N killed it), 127 when CMD is not found, 126 when
it is not executable, and 1 when it cannot be started otherwise.

Examples:
  localcloud run -f examples/stack.yaml -- go run ./examples/worker
  localcloud run -- env | grep LOCALCLOUD_

Flags:
`)
	printDefaults(c.app.stdout, fs)
}
