// Package apilist writes down the exported API of skiplock's public packages,
// one line per identifier with its full signature, and compares two such
// listings. The listings of the released API are kept in api/*.txt; the test
// of this package fails when the code no longer has one of their lines
// (an identifier removed, or its signature changed: a breaking change) or has
// a line they lack (an addition not written down yet). `make api` rewrites
// them; docs/api.md says when that is the right thing to do.
//
// The types come from the compiler's export data (go list -export), so a
// signature is what the compiler sees: parameter names, comments and the
// order of declarations do not matter.
package apilist

import (
	"bufio"
	"bytes"
	"fmt"
	"go/constant"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// Packages are the public packages whose API the listings record, by the
// file name of their listing. bench/... (the harness behind `skiplock
// bench`), cmd/... and test/... are importable but promise nothing.
var Packages = map[string]string{
	"skiplock.txt":     "github.com/skiplock/skiplock",
	"dashboard.txt":    "github.com/skiplock/skiplock/dashboard",
	"devdb.txt":        "github.com/skiplock/skiplock/devdb",
	"metrics.txt":      "github.com/skiplock/skiplock/metrics",
	"skiplocktest.txt": "github.com/skiplock/skiplock/skiplocktest",
}

// Load returns the listing of each package path, type-checked from the
// export data that `go list -export`, run in dir (the module's root),
// builds.
func Load(dir string, paths ...string) (map[string][]string, error) {
	args := append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}, paths...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export: %w: %s", err, stderr.String())
	}
	exports := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		path, file, _ := strings.Cut(sc.Text(), "\t")
		exports[path] = file
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file := exports[path]
		if file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	lists := map[string][]string{}
	for _, p := range paths {
		pkg, err := imp.Import(p)
		if err != nil {
			return nil, fmt.Errorf("import %s: %w", p, err)
		}
		lists[p] = List(pkg)
	}
	return lists, nil
}

// List returns pkg's exported API, sorted: one line per constant, variable,
// function, type, exported struct field (embedded ones too) and exported
// method (an interface's included). Types of pkg are written unqualified,
// types of other packages by package name, and a type of an internal
// package by its full path, so that a leak stands out.
func List(pkg *types.Package) []string {
	q := qualifier(pkg)
	var lines []string
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.Const:
			lines = append(lines, fmt.Sprintf("const %s %s = %s", name, typeString(o.Type(), q), constValue(o)))
		case *types.Var:
			lines = append(lines, fmt.Sprintf("var %s %s", name, typeString(o.Type(), q)))
		case *types.Func:
			sig := o.Type().(*types.Signature)
			lines = append(lines, fmt.Sprintf("func %s%s%s", name, typeParams(sig.TypeParams(), q), signature(sig, q)))
		case *types.TypeName:
			lines = append(lines, typeLines(o, q)...)
		}
	}
	sort.Strings(lines)
	return lines
}

func qualifier(pkg *types.Package) types.Qualifier {
	return func(p *types.Package) string {
		switch {
		case p == pkg:
			return ""
		case strings.Contains(p.Path(), "/internal/"):
			return p.Path()
		}
		return p.Name()
	}
}

// constValue writes a constant as Go would, with big numbers exact; a
// time.Duration also as people read it.
func constValue(c *types.Const) string {
	v := c.Val()
	if v.Kind() == constant.String {
		return v.ExactString()
	}
	if v.Kind() == constant.Int && types.TypeString(c.Type(), nil) == "time.Duration" {
		if n, ok := constant.Int64Val(v); ok {
			return fmt.Sprintf("%s (%s)", v.String(), time.Duration(n))
		}
	}
	return v.String()
}

// typeString is types.TypeString without the parameter names of func
// types, at any depth (a field of type func(attempt int) time.Duration is
// written func(int) time.Duration).
func typeString(t types.Type, q types.Qualifier) string {
	switch t := t.(type) {
	case *types.Signature:
		return "func" + signature(t, q)
	case *types.Pointer:
		return "*" + typeString(t.Elem(), q)
	case *types.Slice:
		return "[]" + typeString(t.Elem(), q)
	case *types.Array:
		return fmt.Sprintf("[%d]%s", t.Len(), typeString(t.Elem(), q))
	case *types.Map:
		return "map[" + typeString(t.Key(), q) + "]" + typeString(t.Elem(), q)
	case *types.Chan:
		switch t.Dir() {
		case types.SendOnly:
			return "chan<- " + typeString(t.Elem(), q)
		case types.RecvOnly:
			return "<-chan " + typeString(t.Elem(), q)
		}
		return "chan " + typeString(t.Elem(), q)
	}
	return types.TypeString(t, q)
}

// typeParams writes [T any, U comparable], or nothing.
func typeParams(tp *types.TypeParamList, q types.Qualifier) string {
	if tp.Len() == 0 {
		return ""
	}
	parts := make([]string, tp.Len())
	for i := range tp.Len() {
		p := tp.At(i)
		parts[i] = p.Obj().Name() + " " + types.TypeString(p.Constraint(), q)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// signature writes (T1, T2) (R1, R2) without parameter names: renaming a
// parameter changes no caller.
func signature(sig *types.Signature, q types.Qualifier) string {
	params := make([]string, sig.Params().Len())
	for i := range params {
		t := sig.Params().At(i).Type()
		if sig.Variadic() && i == len(params)-1 {
			params[i] = "..." + typeString(t.(*types.Slice).Elem(), q)
			continue
		}
		params[i] = typeString(t, q)
	}
	s := "(" + strings.Join(params, ", ") + ")"
	switch n := sig.Results().Len(); n {
	case 0:
	case 1:
		s += " " + typeString(sig.Results().At(0).Type(), q)
	default:
		res := make([]string, n)
		for i := range res {
			res[i] = typeString(sig.Results().At(i).Type(), q)
		}
		s += " (" + strings.Join(res, ", ") + ")"
	}
	return s
}

// typeLines writes a type: its declaration, then its exported fields and
// methods.
func typeLines(tn *types.TypeName, q types.Qualifier) []string {
	name := tn.Name()
	if tn.IsAlias() {
		return []string{fmt.Sprintf("type %s = %s", name, types.TypeString(types.Unalias(tn.Type()), q))}
	}
	named, ok := tn.Type().(*types.Named)
	if !ok {
		return []string{fmt.Sprintf("type %s %s", name, types.TypeString(tn.Type().Underlying(), q))}
	}
	decl := name + typeParams(named.TypeParams(), q)
	var lines []string
	switch u := named.Underlying().(type) {
	case *types.Struct:
		lines = append(lines, "type "+decl+" struct")
		for i := range u.NumFields() {
			f := u.Field(i)
			if !f.Exported() {
				continue
			}
			line := fmt.Sprintf("field %s.%s %s", name, f.Name(), typeString(f.Type(), q))
			if f.Embedded() {
				line += " (embedded)"
			}
			lines = append(lines, line)
		}
	case *types.Interface:
		lines = append(lines, "type "+decl+" interface")
		for i := range u.NumMethods() {
			m := u.Method(i)
			if m.Exported() {
				lines = append(lines, fmt.Sprintf("method (%s) %s%s", name, m.Name(), signature(m.Type().(*types.Signature), q)))
			}
		}
		for i := range u.NumEmbeddeds() {
			lines = append(lines, fmt.Sprintf("embed (%s) %s", name, types.TypeString(u.EmbeddedType(i), q)))
		}
	default:
		lines = append(lines, fmt.Sprintf("type %s %s", decl, typeString(u, q)))
	}
	for i := range named.NumMethods() {
		m := named.Method(i)
		if !m.Exported() {
			continue
		}
		sig := m.Type().(*types.Signature)
		recv := name
		if _, ptr := sig.Recv().Type().(*types.Pointer); ptr {
			recv = "*" + name
		}
		lines = append(lines, fmt.Sprintf("method (%s) %s%s", recv, m.Name(), signature(sig, q)))
	}
	return lines
}

// Key is what a line declares, without its signature: "func Handle",
// "method (*Client) JobGet", "field Job.Args", "type Client".
func Key(line string) string {
	if strings.HasPrefix(line, "method (") || strings.HasPrefix(line, "embed (") {
		end := strings.Index(line, ") ")
		if end < 0 {
			return line
		}
		return line[:end+2] + name(line[end+2:])
	}
	kind, rest, _ := strings.Cut(line, " ")
	return kind + " " + name(rest)
}

// name is the identifier a declaration's text starts with.
func name(s string) string {
	if i := strings.IndexAny(s, "([ "); i >= 0 {
		return s[:i]
	}
	return s
}

// Diff is what changed between a recorded listing and the code's.
type Diff struct {
	// Removed lists recorded lines whose identifier is gone.
	Removed []string
	// Changed pairs a recorded line with the code's line for the same
	// identifier: "was: ... / now: ...".
	Changed []string
	// Added lists the code's lines for identifiers the listing lacks.
	Added []string
}

// Breaking reports whether the diff breaks code built on the recorded API.
func (d Diff) Breaking() bool { return len(d.Removed) > 0 || len(d.Changed) > 0 }

// Empty reports whether the listing and the code agree.
func (d Diff) Empty() bool { return !d.Breaking() && len(d.Added) == 0 }

// Compare compares a recorded listing with the code's, line by line by Key.
func Compare(recorded, current []string) Diff {
	now := map[string]string{}
	for _, l := range current {
		now[Key(l)] = l
	}
	was := map[string]bool{}
	var d Diff
	for _, l := range recorded {
		k := Key(l)
		was[k] = true
		switch cur, ok := now[k]; {
		case !ok:
			d.Removed = append(d.Removed, l)
		case cur != l:
			d.Changed = append(d.Changed, "was: "+l+"\n  now: "+cur)
		}
	}
	for _, l := range current {
		if !was[Key(l)] {
			d.Added = append(d.Added, l)
		}
	}
	return d
}

// Header starts every listing file; lines starting with # are comments.
const Header = "# The exported API of %s, one line per identifier (generated: make api).\n" +
	"# A test fails when the code drops or changes a line here: see docs/api.md, \"The API guard\".\n"

// Format writes a listing file.
func Format(path string, lines []string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, Header, path)
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Parse reads a listing file: its lines, without comments and blank lines.
func Parse(data []byte) []string {
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines
}
