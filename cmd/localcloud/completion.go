package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
)

// completionCommand prints a shell completion script.
type completionCommand struct {
	app *app
}

func (c *completionCommand) flags() *flag.FlagSet { return newFlagSet("completion") }

// completionShells are the shells completion writes a script for.
var completionShells = []string{"bash", "zsh", "fish"}

func (c *completionCommand) Run(ctx context.Context, args []string) error {
	fs := c.flags()
	pos, err := parseWantArgs(fs, args, 1, 1, "a shell: bash, zsh or fish")
	if err != nil {
		return err
	}
	var script string
	switch pos[0] {
	case "bash":
		script = bashCompletion()
	case "zsh":
		script = zshCompletion()
	case "fish":
		script = fishCompletion()
	default:
		return &usageError{
			msg: fmt.Sprintf("completion: unknown shell %q; localcloud writes scripts for %s", pos[0], strings.Join(completionShells, ", ")),
			try: "localcloud completion bash",
		}
	}
	_, err = fmt.Fprint(c.app.stdout, script)
	return err
}

func commandNamesInOrder() []string {
	names := make([]string, 0, len(commandList))
	for _, c := range commandList {
		names = append(names, c.name)
	}
	return names
}

// completionFlags are the flags offered after a command; -f/--file then
// completes a file name.
const completionFlags = "-f --file --json -h --help"

// completeBindingsName is the hidden command the scripts run for binding
// names: "localcloud __bindings [kv|queue] [-f FILE]" prints the names of
// the stack's bindings of that type (all without one), one per line.
const completeBindingsName = "__bindings"

// bindingNamesShell is the shell command that prints the names of the
// stack's bindings of type typ ("" for all), for a kv command only the kv
// bindings, for a queue command only the queues.
func bindingNamesShell(typ string) string {
	if typ != "" {
		typ += " "
	}
	return "localcloud " + completeBindingsName + " " + typ + "$lc_file 2>/dev/null"
}

// completeBindingsCommand is completeBindingsName.
type completeBindingsCommand struct {
	app *app
}

func (c *completeBindingsCommand) Run(_ context.Context, args []string) error {
	fs := newFlagSet(completeBindingsName)
	file := stackFlag(fs)
	pos, err := parseWantArgs(fs, args, 0, 1, "[kv|queue]")
	if err != nil {
		return err
	}
	st, err := c.app.loadStack(*file)
	if err != nil {
		return err
	}
	for _, b := range st.Bindings {
		if len(pos) == 0 || string(b.Type) == pos[0] {
			fmt.Fprintln(c.app.stdout, b.Name)
		}
	}
	return nil
}

func (c *completeBindingsCommand) Usage() {
	fmt.Fprintln(c.app.stdout, "Usage: localcloud "+completeBindingsName+" [kv|queue] [-f FILE] (for the completion scripts)")
}

func bashCompletion() string {
	return `# bash completion for localcloud. Load it with
#   source <(localcloud completion bash)
# or save it as ~/.local/share/bash-completion/completions/localcloud.
_localcloud() {
    local cur prev cmd lc_file i n w
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    cmd=${COMP_WORDS[1]}
    lc_file=
    # n: the positional words before the current one (flags and the value
    # of -f skipped), so "queue peek -f x.yaml BINDING" completes BINDING.
    n=0
    for ((i = 0; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        case $w in
            -f|--file) lc_file="-f ${COMP_WORDS[i+1]}"; ((i++)) ;;
            -*) ;;
            *) ((n++)) ;;
        esac
    done
    case $prev in
        -f|--file) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    esac
    if ((n == 1)); then
        COMPREPLY=($(compgen -W "` + strings.Join(commandNamesInOrder(), " ") + ` --version -h --help" -- "$cur"))
        return
    fi
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "` + completionFlags + `" -- "$cur"))
        return
    fi
    case $cmd in
        kv)
            if ((n == 2)); then COMPREPLY=($(compgen -W "` + strings.Join(kvSubcommands, " ") + `" -- "$cur"));
            elif ((n == 3)); then COMPREPLY=($(compgen -W "$(` + bindingNamesShell("kv") + `)" -- "$cur")); fi ;;
        queue)
            if ((n == 2)); then COMPREPLY=($(compgen -W "` + strings.Join(queueSubcommands, " ") + `" -- "$cur"));
            elif ((n == 3)); then COMPREPLY=($(compgen -W "$(` + bindingNamesShell("queue") + `)" -- "$cur")); fi ;;
        check|backup|restore)
            COMPREPLY=($(compgen -W "$(` + bindingNamesShell("") + `)" -- "$cur")) ;;
        migrate)
            if [[ $prev == --to ]]; then COMPREPLY=($(compgen -W "jetstream sqlite" -- "$cur"));
            else COMPREPLY=($(compgen -W "$(` + bindingNamesShell("") + `) --to" -- "$cur")); fi ;;
        completion)
            COMPREPLY=($(compgen -W "` + strings.Join(completionShells, " ") + `" -- "$cur")) ;;
        bench)
            COMPREPLY=($(compgen -W "kv queue" -- "$cur")) ;;
        validate|init)
            COMPREPLY=($(compgen -f -- "$cur")) ;;
        run)
            COMPREPLY=($(compgen -c -- "$cur")) ;;
    esac
}
complete -F _localcloud localcloud
`
}

func zshCompletion() string {
	var cmds strings.Builder
	for _, c := range commandList {
		fmt.Fprintf(&cmds, "        '%s:%s'\n", c.name, strings.ReplaceAll(c.summary, "'", "'\\''"))
	}
	return `#compdef localcloud
# zsh completion for localcloud. Load it with
#   source <(localcloud completion zsh)
# or save it as _localcloud in a folder of $fpath.
_localcloud() {
    local -a commands
    commands=(
` + cmds.String() + `    )
    local lc_file=
    local i
    for ((i = 2; i < CURRENT; i++)); do
        [[ ${words[i]} == -f || ${words[i]} == --file ]] && lc_file="-f ${words[i+1]}"
    done
    if [[ ${words[CURRENT-1]} == -f || ${words[CURRENT-1]} == --file ]]; then
        _files; return
    fi
    if (( CURRENT == 2 )); then
        _describe -t commands 'localcloud command' commands; return
    fi
    if [[ ${words[CURRENT]} == -* ]]; then
        compadd -- ` + completionFlags + `; return
    fi
    case ${words[2]} in
        kv)
            if (( CURRENT == 3 )); then compadd -- ` + strings.Join(kvSubcommands, " ") + `;
            elif (( CURRENT == 4 )); then compadd -- ${(f)"$(` + bindingNamesShell("kv") + `)"}; fi ;;
        queue)
            if (( CURRENT == 3 )); then compadd -- ` + strings.Join(queueSubcommands, " ") + `;
            elif (( CURRENT == 4 )); then compadd -- ${(f)"$(` + bindingNamesShell("queue") + `)"}; fi ;;
        check|backup|restore) compadd -- ${(f)"$(` + bindingNamesShell("") + `)"} ;;
        migrate)
            if [[ ${words[CURRENT-1]} == --to ]]; then compadd -- jetstream sqlite;
            else compadd -- ${(f)"$(` + bindingNamesShell("") + `)"} --to; fi ;;
        completion) compadd -- ` + strings.Join(completionShells, " ") + ` ;;
        bench) compadd -- kv queue ;;
        validate|init) _files ;;
        run) _command_names ;;
    esac
}
compdef _localcloud localcloud
`
}

func fishCompletion() string {
	var b strings.Builder
	b.WriteString(`# fish completion for localcloud. Load it with
#   localcloud completion fish | source
# or save it as ~/.config/fish/completions/localcloud.fish.
complete -c localcloud -f
complete -c localcloud -s f -l file -r -F -d 'stack file'
complete -c localcloud -l json -d 'print one JSON object'
complete -c localcloud -n __fish_use_subcommand -l version -d 'print the version'
function __localcloud_bindings
    set -l lc_file
    set -l words (commandline -opc)
    for i in (seq (count $words))
        if contains -- $words[$i] -f --file; and test $i -lt (count $words)
            set lc_file -f $words[(math $i + 1)]
        end
    end
    localcloud ` + completeBindingsName + ` $argv $lc_file 2>/dev/null
end
`)
	for _, c := range commandList {
		fmt.Fprintf(&b, "complete -c localcloud -n __fish_use_subcommand -a %s -d '%s'\n", c.name, strings.ReplaceAll(c.summary, "'", `\'`))
	}
	fmt.Fprintf(&b, "complete -c localcloud -n '__fish_seen_subcommand_from kv; and not __fish_seen_subcommand_from %s' -a '%s'\n",
		strings.Join(kvSubcommands, " "), strings.Join(kvSubcommands, " "))
	fmt.Fprintf(&b, "complete -c localcloud -n '__fish_seen_subcommand_from queue; and not __fish_seen_subcommand_from %s' -a '%s'\n",
		strings.Join(queueSubcommands, " "), strings.Join(queueSubcommands, " "))
	fmt.Fprintf(&b, "complete -c localcloud -n '__fish_seen_subcommand_from check backup restore migrate' -a '(__localcloud_bindings)'\n")
	fmt.Fprintf(&b, "complete -c localcloud -n '__fish_seen_subcommand_from kv; and __fish_seen_subcommand_from %s' -a '(__localcloud_bindings kv)'\n",
		strings.Join(kvSubcommands, " "))
	fmt.Fprintf(&b, "complete -c localcloud -n '__fish_seen_subcommand_from queue; and __fish_seen_subcommand_from %s' -a '(__localcloud_bindings queue)'\n",
		strings.Join(queueSubcommands, " "))
	b.WriteString("complete -c localcloud -n '__fish_seen_subcommand_from migrate' -l to -x -a 'jetstream sqlite' -d 'the engine to move to'\n")
	fmt.Fprintf(&b, "complete -c localcloud -n '__fish_seen_subcommand_from completion' -a '%s'\n", strings.Join(completionShells, " "))
	b.WriteString("complete -c localcloud -n '__fish_seen_subcommand_from bench' -a 'kv queue'\n")
	b.WriteString("complete -c localcloud -n '__fish_seen_subcommand_from validate init' -F\n")
	return b.String()
}

func (c *completionCommand) Usage() {
	fmt.Fprint(c.app.stdout, `Print a shell completion script for localcloud.

Usage:
  localcloud completion bash|zsh|fish

The script completes commands, the subcommands of kv and queue, flags, the
stack file after -f, and binding names read from the stack file: kv
commands offer the kv bindings, queue commands the queues, check, backup
and restore all of them.

Examples:
  source <(localcloud completion bash)        # in ~/.bashrc
  source <(localcloud completion zsh)         # in ~/.zshrc
  localcloud completion fish | source          # in ~/.config/fish/config.fish
`)
}
