package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/localcloud/localcloud/config"
)

// initCommand writes a commented starter stack file.
type initCommand struct {
	app *app
}

func (c *initCommand) flags() (*flag.FlagSet, *string, *bool) {
	fs := newFlagSet("init")
	name := fs.String("name", "", "the stack's `NAME` (default: the folder's name, made valid, else app)")
	gitignore := fs.Bool("gitignore", false, "add .localcloud/ to DIR/.gitignore without asking (--gitignore=false: never; default: ask on a terminal)")
	return fs, name, gitignore
}

// stackNameRE is the rule for stack names (config checks it too).
var stackNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

func (c *initCommand) Run(ctx context.Context, args []string) error {
	flags, name, gitignore := c.flags()
	pos, err := parseWantArgs(flags, args, 0, 1, "at most one folder DIR")
	if err != nil {
		return err
	}
	dir := "."
	if len(pos) == 1 {
		dir = pos[0]
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("resolve folder %s: %w", dir, err)
	}
	if *name == "" {
		*name = nameFromFolder(filepath.Base(abs))
	}
	if !stackNameRE.MatchString(*name) {
		return &usageError{
			msg: fmt.Sprintf("--name: %q is not a stack name: a lowercase letter, then up to 62 lowercase letters, digits or hyphens", *name),
			try: "localcloud init --name shop",
		}
	}
	for _, existing := range []string{config.DefaultStackFile, config.AltStackFile} {
		p := filepath.Join(dir, existing)
		if _, err := os.Lstat(p); err == nil {
			return &hintError{
				err: fmt.Errorf("%s already exists; init never overwrites a stack file", p),
				try: fmt.Sprintf("edit it, or check it with localcloud validate %s", p),
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create folder %s: %w", dir, err)
	}
	file := filepath.Join(dir, config.DefaultStackFile)
	// O_EXCL: a file created meanwhile is not overwritten either.
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return &hintError{err: fmt.Errorf("%s already exists; init never overwrites a stack file", file), try: "edit it"}
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", file, err)
	}
	_, werr := f.WriteString(starterStack(*name))
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(file)
		return fmt.Errorf("write %s: %w", file, err)
	}
	fmt.Fprintf(c.app.stderr, "wrote %s (stack %s: kv binding cache, queue binding jobs with jobs-dlq)\n", file, *name)
	if err := c.offerGitignore(flags, dir, *gitignore); err != nil {
		return err
	}
	fmt.Fprintf(c.app.stderr, "next: localcloud up -f %s\n", file)
	return nil
}

// dataDirIgnore is the .gitignore line for the starter stack's dataDir.
const dataDirIgnore = ".localcloud/"

// offerGitignore adds dataDirIgnore to DIR/.gitignore: with --gitignore at
// once, with --gitignore=false never, else after asking when stdin is a
// terminal; otherwise it says how. A .gitignore that already ignores the
// folder is left as it is.
func (c *initCommand) offerGitignore(flags *flag.FlagSet, dir string, add bool) error {
	path := filepath.Join(dir, ".gitignore")
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	for _, l := range strings.Split(string(old), "\n") {
		switch strings.TrimSpace(l) {
		case ".localcloud", ".localcloud/", "/.localcloud", "/.localcloud/":
			return nil
		}
	}
	set := false
	flags.Visit(func(f *flag.Flag) { set = set || f.Name == "gitignore" })
	switch {
	case set && !add:
		return nil
	case !set && !isTTY(c.app.stdin):
		fmt.Fprintf(c.app.stderr, "tip: the stores live in %s; add %s to %s (localcloud init --gitignore does)\n",
			filepath.Join(dir, ".localcloud"), dataDirIgnore, path)
		return nil
	case !set:
		fmt.Fprintf(c.app.stderr, "Add %s to %s, so git leaves the stores alone? [Y/n] ", dataDirIgnore, path)
		answer, _ := bufio.NewReader(c.app.stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "" && a != "y" && a != "yes" {
			return nil
		}
	}
	text := string(old)
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	text += "# localcloud's stores (localcloud init)\n" + dataDirIgnore + "\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fmt.Fprintf(c.app.stderr, "added %s to %s\n", dataDirIgnore, path)
	return nil
}

// nameFromFolder makes a stack name of a folder name: lower case, runs of
// other characters as one hyphen; "app" when nothing usable is left.
func nameFromFolder(base string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(base) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	n := strings.Trim(b.String(), "-")
	n = strings.TrimLeft(n, "0123456789-")
	if len(n) > 63 {
		n = strings.TrimRight(n[:63], "-")
	}
	if !stackNameRE.MatchString(n) {
		return "app"
	}
	return n
}

// starterStack is the file init writes.
func starterStack(name string) string {
	return `# A localcloud stack file, written by localcloud init.
#
#   localcloud validate            check it
#   localcloud up                  serve it (Ctrl-C stops)
#   localcloud run -- CMD          run your app with the bindings' environment
#
# ${NAME} in a value is replaced by the environment variable NAME; $$ is a $.

# The stack file format. Always 1 for now.
version: 1

# The stack's name: a lowercase letter, then up to 62 lowercase letters,
# digits or hyphens. Wake-up hints go out on localcloud.<name>.<binding>.available.
name: ` + name + `

# The folder that holds one store per binding, relative to this file.
# Keep it out of git (.gitignore: .localcloud/; localcloud init --gitignore
# adds that line).
dataDir: .localcloud

# The embedded NATS server that wakes waiting consumers. Left out, it
# listens on 127.0.0.1 and this stack's own default port (derived from the
# data dir; up prints it), the same at every start of up. Should another
# program hold that port, up takes a free one and apps find it in
# <dataDir>/runtime.json. To choose one:
# notify:
#   listen: 127.0.0.1:4222   # port 0 picks a free port at every start

# One entry per KV store or queue. An app finds binding NAME in
# LOCALCLOUD_BINDING_<NAME> (kv.FromEnv / queue.FromEnv in Go).
bindings:
  # A key-value store, in <dataDir>/kv/cache.
  cache:
    type: kv
    # durability: full    # fsync every commit (survives a power cut); default normal

  # A queue, in <dataDir>/queue/jobs.
  jobs:
    type: queue
    # How long a received message stays hidden before it is delivered again
    # unless acked: 1s to 12h.
    visibilityTimeout: 30s
    # After 5 deliveries a message moves to jobs-dlq instead (1 to 1000).
    maxAttempts: 5
    deadLetter: jobs-dlq

  # Where jobs that failed 5 times wait; localcloud queue redrive jobs-dlq
  # sends them back.
  jobs-dlq:
    type: queue
`
}

func (c *initCommand) Usage() {
	fs, _, _ := c.flags()
	fmt.Fprint(c.app.stdout, `Write a commented starter stack.yaml.

Usage:
  localcloud init [DIR] [--name NAME]

Writes DIR/stack.yaml (DIR defaults to the current folder, and is created
if needed) with a KV binding, a queue and its dead-letter queue, every
setting explained. It never overwrites: when DIR already has a stack.yaml
or stack.yml, init fails and changes nothing.

The stores live in DIR/.localcloud, which git should not track: init
offers to add .localcloud/ to DIR/.gitignore (it asks when stdin is a
terminal; --gitignore adds it without asking, --gitignore=false never
does, and without a terminal init only prints the tip). A .gitignore that
already ignores the folder is left alone.

Examples:
  localcloud init
  localcloud init services/shop --name shop
  localcloud init --gitignore

Flags:
`)
	printDefaults(c.app.stdout, fs)
}
