// Command apicount prints the exported identifiers of surely's library
// packages, per package and in total, and the option types among them:
// figures of docs/API.md.
//
//	go run ./internal/apicount [-v] [module root, default .]
//
// Library packages are all but cmd/, examples/, internal/, bench/,
// integration/, testdata/ and the conformance suites (directories ending in
// "test"). Counted: exported top-level constants, variables, functions and
// types, and the exported methods of exported types; struct fields and
// interface methods are not. An option type is an exported type, not an
// alias, whose name ends in "Option" or "Options". -v lists every counted
// identifier.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// skipped reports whether directory name holds no library package.
func skipped(name string) bool {
	switch name {
	case "internal", "cmd", "examples", "bench", "integration", "testdata":
		return true
	}
	return strings.HasSuffix(name, "test") || strings.HasPrefix(name, ".")
}

func main() {
	verbose := flag.Bool("v", false, "list every counted identifier")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	perPkg := map[string][]string{}
	var optionTypes []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skipped(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		dir, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		names, opts := exported(f)
		perPkg[dir] = append(perPkg[dir], names...)
		for _, o := range opts {
			optionTypes = append(optionTypes, dir+"."+o)
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicount:", err)
		os.Exit(1)
	}
	pkgs := make([]string, 0, len(perPkg))
	for p := range perPkg {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	total := 0
	for _, p := range pkgs {
		names := perPkg[p]
		total += len(names)
		fmt.Printf("%5d %s\n", len(names), p)
		if *verbose {
			sort.Strings(names)
			for _, n := range names {
				fmt.Printf("        %s\n", n)
			}
		}
	}
	fmt.Printf("%5d exported identifiers in %d packages\n", total, len(pkgs))
	sort.Strings(optionTypes)
	fmt.Printf("%5d option types: %s\n", len(optionTypes), strings.Join(optionTypes, " "))
}

// exported returns the exported identifiers f declares and, among them, its
// option types.
func exported(f *ast.File) (names, options []string) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				names = append(names, d.Name.Name)
				continue
			}
			if recv := receiver(d.Recv.List[0].Type); ast.IsExported(recv) {
				names = append(names, recv+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					names = append(names, s.Name.Name)
					if !s.Assign.IsValid() && (strings.HasSuffix(s.Name.Name, "Option") || strings.HasSuffix(s.Name.Name, "Options")) {
						options = append(options, s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							names = append(names, n.Name)
						}
					}
				}
			}
		}
	}
	return names, options
}

// receiver returns the type name of a method receiver expression.
func receiver(t ast.Expr) string {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
