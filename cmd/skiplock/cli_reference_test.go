package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The CLI reference, docs/reference/cli.md, is generated from the command
// tree itself, so it cannot describe a command, a flag or a default that is
// not the binary's. TestCLIReferenceIsCurrent fails when the file differs
// from what the tree renders today (a command or flag added, renamed or
// documented differently); `make docs` (go test -run TestCLIReferenceIsCurrent
// -update ./cmd/skiplock) writes it anew.

const cliReference = "../../docs/reference/cli.md"

var updateReference = flag.Bool("update", false, "write docs/reference/cli.md from the command tree")

func TestCLIReferenceIsCurrent(t *testing.T) {
	t.Parallel()
	got := renderCLIReference(referenceTree())
	if *updateReference {
		if err := os.WriteFile(cliReference, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(cliReference)
	if err != nil {
		t.Fatalf("%s: %v (write it with `make docs`)", cliReference, err)
	}
	if string(want) != got {
		t.Fatalf("%s is stale: the command tree renders it differently (%s).\n"+
			"Run `make docs` and commit the file.", cliReference, firstDifference(string(want), got))
	}
}

// TestCLIReferenceCatchesANewCommand shows the staleness test firing: a
// command added to the tree renders a page that differs from the one on
// disk, naming the command.
func TestCLIReferenceCatchesANewCommand(t *testing.T) {
	t.Parallel()
	root := referenceTree()
	root.AddCommand(&cobra.Command{Use: "frobnicate", Short: "A command nobody documented", RunE: func(*cobra.Command, []string) error { return nil }})
	got := renderCLIReference(root)
	if got == renderCLIReference(referenceTree()) {
		t.Fatal("adding a command did not change the rendered reference")
	}
	if !strings.Contains(got, "## skiplock frobnicate") {
		t.Fatal("the new command has no section in the rendered reference")
	}
}

// referenceTree is the command tree as a user with an empty environment sees
// it: defaults that read SKIPLOCK_* or PG* variables render their built-in
// values, whoever generates the page.
func referenceTree() *cobra.Command {
	root, _ := newCommandTree(process{
		getenv:     func(string) string { return "" },
		notify:     signal.Notify,
		stopNotify: signal.Stop,
	})
	return root
}

// renderCLIReference writes one page for the whole tree: every command in
// the order of the tree, depth first, with its usage, description, its own
// flags and the global flags once at the top.
func renderCLIReference(root *cobra.Command) string {
	var b bytes.Buffer
	b.WriteString("# CLI reference\n\n")
	b.WriteString("Generated from the command tree by `make docs`; `TestCLIReferenceIsCurrent`\n")
	b.WriteString("(`cmd/skiplock/cli_reference_test.go`) fails when this page is not what the binary would print.\n")
	b.WriteString("Every command reads the connection from `--database-url`, else `$DATABASE_URL`, else libpq's `PG*`\n")
	b.WriteString("variables. Data goes to stdout, logs and progress to stderr. Exit codes: 0 ok, 1 runtime error,\n")
	b.WriteString("2 usage error, 3 check failed.\n\n")

	var cmds []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		cmds = append(cmds, c)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)

	b.WriteString("## Commands\n\n")
	for _, c := range cmds[1:] {
		fmt.Fprintf(&b, "- [`%s`](#%s) — %s\n", c.CommandPath(), anchor(c.CommandPath()), c.Short)
	}
	b.WriteString("\n## Global flags\n\n")
	b.WriteString("Accepted by every command.\n\n")
	writeFlags(&b, root.PersistentFlags())

	for _, c := range cmds[1:] {
		fmt.Fprintf(&b, "\n## %s\n\n", c.CommandPath())
		if c.Short != "" {
			fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(c.Short))
		}
		fmt.Fprintf(&b, "```\n%s\n```\n\n", strings.TrimSpace(c.UseLine()))
		if c.Long != "" {
			fmt.Fprintf(&b, "%s\n\n", indentFences(strings.TrimSpace(c.Long)))
		}
		if c.Example != "" {
			fmt.Fprintf(&b, "Examples:\n\n```\n%s\n```\n\n", strings.TrimRight(c.Example, "\n"))
		}
		if subs := visibleSubcommands(c); len(subs) > 0 {
			b.WriteString("Subcommands: ")
			for i, s := range subs {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "[`%s`](#%s)", s.Name(), anchor(s.CommandPath()))
			}
			b.WriteString(".\n\n")
		}
		if c.HasAvailableLocalFlags() {
			writeFlags(&b, c.LocalNonPersistentFlags())
		}
		if c != root && c.HasAvailablePersistentFlags() && c.PersistentFlags().HasAvailableFlags() {
			writeFlags(&b, c.PersistentFlags())
		}
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

func visibleSubcommands(c *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, s := range c.Commands() {
		if !s.Hidden && s.Name() != "help" && s.Name() != "completion" {
			out = append(out, s)
		}
	}
	return out
}

// writeFlags renders a flag set as pflag's own usage text, in a code block so
// that its alignment survives.
func writeFlags(b *bytes.Buffer, fs *pflag.FlagSet) {
	usage := strings.TrimRight(fs.FlagUsagesWrapped(100), "\n")
	if usage == "" {
		return
	}
	fmt.Fprintf(b, "```\n%s\n```\n", usage)
}

var notAnchor = regexp.MustCompile(`[^a-z0-9 -]`)

// anchor is the heading's anchor as GitHub makes it.
func anchor(heading string) string {
	return strings.ReplaceAll(notAnchor.ReplaceAllString(strings.ToLower(heading), ""), " ", "-")
}

// indentFences keeps a Long text's own lines readable in Markdown: text as
// it is, lines that were indented (examples, tables) in a code block.
func indentFences(s string) string {
	lines := strings.Split(s, "\n")
	var out []string
	in := false
	for _, l := range lines {
		code := strings.HasPrefix(l, "  ") || strings.HasPrefix(l, "\t")
		if code && !in {
			out = append(out, "```")
			in = true
		}
		if !code && in && strings.TrimSpace(l) != "" {
			out = append(out, "```")
			in = false
		}
		out = append(out, l)
	}
	if in {
		out = append(out, "```")
	}
	return strings.Join(out, "\n")
}

func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d: file has %q, the tree renders %q", i+1, x, y)
		}
	}
	return "no line differs"
}
