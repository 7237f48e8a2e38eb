package main

import (
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// subHelp is the error parseFlags returns for -h: it is flag.ErrHelp and
// carries the flag set, so "queue send -h" can print the help of send
// alone, with send's own flags.
type subHelp struct{ fs *flag.FlagSet }

func (h *subHelp) Error() string        { return flag.ErrHelp.Error() }
func (h *subHelp) Is(target error) bool { return target == flag.ErrHelp }

// subUsager is a command with subcommands (kv, queue) that prints the help
// of one of them.
type subUsager interface {
	// subUsage prints the help of the subcommand whose flag set is fs
	// (named "queue send") and reports whether it knew the subcommand.
	subUsage(fs *flag.FlagSet) bool
}

// subParagraphRE matches the first line of a subcommand's paragraph in a
// group's help: two spaces, the name, two or more spaces.
var subParagraphRE = regexp.MustCompile(`^  ([a-z]+) {2,}\S`)

// printSubUsage prints the help of the subcommand of fs, cut from its
// group's help text: its usage line, its paragraph, its examples, and
// then the flags it takes.
func printSubUsage(w io.Writer, groupHelp string, subs []string, fs *flag.FlagSet) bool {
	group, sub, ok := strings.Cut(fs.Name(), " ")
	if !ok {
		return false
	}
	known := false
	for _, s := range subs {
		known = known || s == sub
	}
	if !known {
		return false
	}
	lines := strings.Split(groupHelp, "\n")
	prefix := "localcloud " + group + " " + sub + " "
	var usage, examples []string
	section := ""
	for _, l := range lines {
		switch {
		case l == "Usage:" || l == "Examples:" || l == "Flags:":
			section = l
			continue
		case l == "":
			if section != "Usage:" || len(usage) > 0 {
				section = ""
			}
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(l), prefix) || strings.Contains(l, "| "+prefix) {
			switch section {
			case "Usage:":
				usage = append(usage, l)
			case "Examples:":
				examples = append(examples, l)
			}
		}
	}
	para := subParagraph(lines, sub)
	fmt.Fprintf(w, "Usage:\n%s\n", strings.Join(usage, "\n"))
	if len(para) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(para, "\n"))
	}
	if len(examples) > 0 {
		fmt.Fprintf(w, "\nExamples:\n%s\n", strings.Join(examples, "\n"))
	}
	fmt.Fprintln(w, "\nFlags:")
	printDefaults(w, fs)
	fmt.Fprintf(w, "\n\"localcloud %s -h\" describes every %s subcommand.\n", group, group)
	return true
}

// subParagraph is the paragraph of the group help that starts with sub, or
// else the one that mentions it ("ack ...; nack ..." covers nack).
func subParagraph(lines []string, sub string) []string {
	var paras [][]string
	var cur []string
	for _, l := range lines {
		if subParagraphRE.MatchString(l) {
			if cur != nil {
				paras = append(paras, cur)
			}
			cur = []string{l}
			continue
		}
		if cur != nil {
			if strings.TrimSpace(l) == "" || !strings.HasPrefix(l, "   ") {
				paras = append(paras, cur)
				cur = nil
				continue
			}
			cur = append(cur, l)
		}
	}
	if cur != nil {
		paras = append(paras, cur)
	}
	for _, p := range paras {
		if subParagraphRE.FindStringSubmatch(p[0])[1] == sub {
			return p
		}
	}
	word := regexp.MustCompile(`\b` + regexp.QuoteMeta(sub) + `\b`)
	for _, p := range paras {
		if word.MatchString(strings.Join(p, "\n")) {
			return p
		}
	}
	return nil
}
