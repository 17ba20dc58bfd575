// Package sqlfile reads skiplock's .sql files: named statements
// ("-- name: x" sections) with shared fragments ("-- fragment: y" sections,
// expanded where {{y}} appears), rendered for one schema ({{schema}} is the
// quoted identifier, {{schema_lit}} the name as an SQL string literal,
// {{schema_name}} the bare name, for use inside a quoted identifier such as a
// LISTEN channel). It is
// the one loader and the one renderer of every package that owns SQL.
package sqlfile

import (
	"bufio"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Parse reads every .sql file under dir in fsys and returns the statements
// by name, fragments expanded. Two sections of one name, a fragment no
// statement uses, or an unreadable file are errors.
func Parse(fsys fs.FS, dir string) (map[string]string, error) {
	out := map[string]string{}
	frags := map[string]string{}
	err := fs.WalkDir(fsys, dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".sql") {
			return err
		}
		body, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		return parseFile(path, string(body), out, frags)
	})
	if err != nil {
		return nil, err
	}
	// Inserted as written (a condition brings its own parentheses); comment
	// lines go, so none can swallow what follows on the line of use.
	expanded := map[string]string{}
	for name, frag := range frags {
		var lines []string
		for _, l := range strings.Split(frag, "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--") {
				lines = append(lines, l)
			}
		}
		expanded[name] = strings.Join(lines, "\n")
	}
	// A fragment may use others: expand them into it first, as many rounds
	// as nesting is deep (a fragment that uses itself is an error).
	used := map[string]bool{}
	for range len(frags) + 1 {
		changed := false
		for name, v := range expanded {
			for inner, iv := range expanded {
				if strings.Contains(v, "{{"+inner+"}}") {
					if inner == name {
						return nil, fmt.Errorf("sqlfile: fragment %q uses itself", name)
					}
					v, changed, used[inner] = strings.ReplaceAll(v, "{{"+inner+"}}", iv), true, true
				}
			}
			expanded[name] = v
		}
		if !changed {
			break
		}
	}
	for name, frag := range expanded {
		if strings.Contains(frag, "{{") && containsFragment(frag, expanded) {
			return nil, fmt.Errorf("sqlfile: fragment %q: fragments nested too deep or in a cycle", name)
		}
		for k, v := range out {
			if strings.Contains(v, "{{"+name+"}}") {
				out[k], used[name] = strings.ReplaceAll(v, "{{"+name+"}}", frag), true
			}
		}
	}
	for name := range frags {
		if !used[name] {
			return nil, fmt.Errorf("sqlfile: fragment %q is used by no statement", name)
		}
	}
	return out, nil
}

// containsFragment reports whether s still uses one of the fragments.
func containsFragment(s string, frags map[string]string) bool {
	for name := range frags {
		if strings.Contains(s, "{{"+name+"}}") {
			return true
		}
	}
	return false
}

func parseFile(path, body string, out, frags map[string]string) error {
	var name string
	var into map[string]string
	var b strings.Builder
	flush := func() {
		if name != "" {
			into[name] = strings.TrimSpace(b.String())
		}
		b.Reset()
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		n, stmt := strings.CutPrefix(line, "-- name: ")
		f, frag := strings.CutPrefix(line, "-- fragment: ")
		if stmt || frag {
			flush()
			name, into = strings.TrimSpace(n), out
			if frag {
				name, into = strings.TrimSpace(f), frags
			}
			if _, dup := into[name]; dup {
				return fmt.Errorf("sqlfile: duplicate section %q in %s", name, path)
			}
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	flush()
	return sc.Err()
}

// MustParse is Parse for embedded files, which are known at build time: it
// panics on an error (caught by any test of the package).
func MustParse(fsys fs.FS, dir string) map[string]string {
	out, err := Parse(fsys, dir)
	if err != nil {
		panic(err)
	}
	return out
}

// Renderer returns the replacer that renders SQL for schema (a name the
// caller validated).
func Renderer(schema string) *strings.Replacer {
	return strings.NewReplacer(
		"{{schema}}", pgx.Identifier{schema}.Sanitize(),
		"{{schema_lit}}", "'"+schema+"'",
		"{{schema_name}}", schema,
	)
}

// Render renders every statement for schema, passing each through edit
// first when edit is not nil.
func Render(stmts map[string]string, schema string, edit func(string) string) map[string]string {
	r := Renderer(schema)
	out := make(map[string]string, len(stmts))
	for k, v := range stmts {
		if edit != nil {
			v = edit(v)
		}
		out[k] = r.Replace(v)
	}
	return out
}
