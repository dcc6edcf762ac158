// Package sealed checks, from a package's tests, that its sealed types are handled
// exhaustively: every type of a sealed interface (the types with its marker method) has a
// case in the type switches of the functions that handle it, and every constant of an enum
// type a case in a switch of the functions that handle it. Go's compiler checks neither; a new
// action or event without a case would be dropped silently at run time, so a test fails
// instead.
package sealed

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Types fails t unless every type of dir's package (the test's directory when dir is "")
// that has method marker is a case of a type switch in each function named in handlers (a
// method of any receiver, or a plain function).
func Types(t testing.TB, dir, marker string, handlers ...string) {
	t.Helper()
	files := parse(t, dir)
	var sealed []string
	for _, fd := range decls[*ast.FuncDecl](files) {
		if fd.Recv != nil && fd.Name.Name == marker && len(fd.Recv.List) == 1 {
			sealed = append(sealed, typeName(fd.Recv.List[0].Type))
		}
	}
	if len(sealed) == 0 {
		t.Fatalf("no type has the marker method %s", marker)
	}
	slices.Sort(sealed)
	check(t, files, sealed, "types with "+marker, handlers, func(n ast.Node, cases map[string]bool) {
		if ts, ok := n.(*ast.TypeSwitchStmt); ok {
			for _, c := range ts.Body.List {
				for _, e := range c.(*ast.CaseClause).List {
					cases[typeName(e)] = true
				}
			}
		}
	})
}

// Enum fails t unless every constant of type typ declared in dir's package is a case of a
// switch in each function named in handlers.
func Enum(t testing.TB, dir, typ string, handlers ...string) {
	t.Helper()
	files := parse(t, dir)
	var consts []string
	for _, gd := range decls[*ast.GenDecl](files) {
		if gd.Tok != token.CONST {
			continue
		}
		// An iota block: a spec without a type repeats the previous one's.
		var last string
		for _, sp := range gd.Specs {
			vs := sp.(*ast.ValueSpec)
			switch {
			case vs.Type != nil:
				last = typeName(vs.Type)
			case len(vs.Values) > 0:
				last = ""
			}
			if last == typ {
				for _, n := range vs.Names {
					consts = append(consts, n.Name)
				}
			}
		}
	}
	if len(consts) == 0 {
		t.Fatalf("no constant of type %s", typ)
	}
	check(t, files, consts, "constants of "+typ, handlers, func(n ast.Node, cases map[string]bool) {
		if sw, ok := n.(*ast.SwitchStmt); ok && sw.Tag != nil {
			for _, c := range sw.Body.List {
				for _, e := range c.(*ast.CaseClause).List {
					if id, ok := e.(*ast.Ident); ok {
						cases[id.Name] = true
					}
				}
			}
		}
	})
}

// check fails t unless each function named in handlers has a case for every name of want
// (but "_"), in the order of want; addCases adds to cases the cases of a node of a handler's
// body. what says what want holds, for the message.
func check(
	t testing.TB,
	files []*ast.File,
	want []string,
	what string,
	handlers []string,
	addCases func(n ast.Node, cases map[string]bool),
) {
	t.Helper()
	for _, h := range handlers {
		cases := map[string]bool{}
		found := false
		for _, fd := range funcs(files, h) {
			found = true
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				addCases(n, cases)
				return true
			})
		}
		if !found {
			t.Fatalf("no function %s", h)
		}
		var missing []string
		for _, w := range want {
			if !cases[w] && w != "_" {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s has no case for %s (%s)", h, strings.Join(missing, ", "), what)
		}
	}
}

func parse(t testing.TB, dir string) []*ast.File {
	t.Helper()
	if dir == "" {
		var err error
		if dir, err = os.Getwd(); err != nil {
			t.Fatal(err)
		}
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

func funcs(files []*ast.File, name string) []*ast.FuncDecl {
	var out []*ast.FuncDecl
	for _, fd := range decls[*ast.FuncDecl](files) {
		if fd.Name.Name == name && fd.Body != nil {
			out = append(out, fd)
		}
	}
	return out
}

// decls returns the declarations of type D in files, in order.
func decls[D ast.Decl](files []*ast.File) []D {
	var out []D
	for _, f := range files {
		for _, d := range f.Decls {
			if x, ok := d.(D); ok {
				out = append(out, x)
			}
		}
	}
	return out
}

// typeName is the name of a type expression: T, *T, pkg.T and T[X] all give T.
func typeName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.StarExpr:
		return typeName(x.X)
	case *ast.SelectorExpr:
		return x.Sel.Name
	case *ast.IndexExpr:
		return typeName(x.X)
	case *ast.IndexListExpr:
		return typeName(x.X)
	}
	return fmt.Sprintf("%T", e)
}
