package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// No package of the module but a program has an init function, and none
// assigns to a variable of another of the module's packages: an optional
// capability of a store or an archive is an interface its type
// implements, never a registry one package fills in another's init, nor
// a function variable set from outside (docs/API.md, "Optional
// capabilities"). Test files may (a test hook); programs (package main)
// may configure what they import. (internal/sqsemu sets the global
// configuration of the goaws emulator it runs: a library of another
// module that has no other way.)
func TestNoRegistriesInLibraryCode(t *testing.T) {
	root := filepath.Join("..", "..")
	var found []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || isModule(p)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		found = append(found, registries(fset, f)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range found {
		t.Error(problem)
	}
}

// isModule reports whether dir holds a go.mod of its own (a nested module,
// such as examples/externaladapter: not this module's code).
func isModule(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}

// registries returns the init functions of f and its assignments to a
// name of a package of this module it imports, each as "file:line: what".
func registries(fset *token.FileSet, f *ast.File) []string {
	imported := map[string]bool{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if p != module && !strings.HasPrefix(p, module+"/") {
			continue
		}
		name := importName(p)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		imported[name] = true
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			if n.Recv == nil && n.Name.Name == "init" {
				out = append(out, fset.Position(n.Pos()).String()+": func init")
			}
		case *ast.AssignStmt:
			for _, lhs := range n.Lhs {
				sel, ok := lhs.(*ast.SelectorExpr)
				if !ok {
					continue
				}
				if x, ok := sel.X.(*ast.Ident); ok && imported[x.Name] {
					out = append(out, fset.Position(n.Pos()).String()+": assigns "+x.Name+"."+sel.Sel.Name)
				}
			}
		}
		return true
	})
	return out
}

// module is this module's path.
const module = "github.com/surely-dev/surely"

// majorVersion is a major-version element of an import path.
var majorVersion = regexp.MustCompile(`^v[0-9]+$`)

// importName is the usual name of the package at import path p: its last
// element, without a major version ("go-redis/v9" is redis), a "go-"
// prefix or a ".vN" suffix (gopkg.in).
func importName(p string) string {
	if majorVersion.MatchString(path.Base(p)) {
		p = path.Dir(p)
	}
	name := strings.TrimPrefix(path.Base(p), "go-")
	if i := strings.Index(name, ".v"); i > 0 {
		name = name[:i]
	}
	return name
}
