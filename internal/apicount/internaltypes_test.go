package main

import (
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestNoInternalTypeInPublicAPI type-checks every public package of the
// module (all but internal/, cmd/, examples/, testdata/ and nested modules;
// the conformance suites included) and fails when one of its exported
// declarations names a type of an internal package: a function's or
// method's signature, an exported field, an exported interface method or
// embedded interface, a type's definition or alias, a variable's or a
// constant's type. Such a type is one a user cannot name, and "go doc"
// shows it as internal/x.T. Unexported fields and methods (an option type's
// hidden method) are not looked at: "go doc" does not show them.
func TestNoInternalTypeInPublicAPI(t *testing.T) {
	root := moduleRoot(t)
	module := modulePath(t, root)
	dirs := publicDirs(t, root)
	if len(dirs) < 20 {
		t.Fatalf("found %d public packages under %s, expected the module's two dozen", len(dirs), root)
	}
	paths := make([]string, len(dirs))
	for i, dir := range dirs {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		paths[i] = module + "/" + filepath.ToSlash(rel)
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", exportData(t, root, paths))
	var found []string
	for _, path := range paths {
		pkg, err := imp.Import(path)
		if err != nil {
			t.Fatalf("import %s: %v", path, err)
		}
		found = append(found, internalNames(pkg)...)
	}
	sort.Strings(found)
	for _, f := range found {
		t.Error(f)
	}
	if len(found) > 0 {
		t.Errorf("%d exported declarations name an internal type (above)", len(found))
	}
}

// moduleRoot is the module's directory, two levels above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

// exportData returns a lookup of the compiler's export data of paths and
// of every package they import, from "go list -export" (the build cache):
// the types as the compiler sees them, aliases included, in seconds rather
// than the minutes that type-checking every dependency from source takes.
func exportData(t *testing.T, root string, paths []string) func(string) (io.ReadCloser, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}"}, paths...)...)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	files := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, "="); ok && file != "" {
			files[path] = file
		}
	}
	return func(path string) (io.ReadCloser, error) {
		file, ok := files[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	}
}

func modulePath(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-m")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// publicDirs returns the directories under root that hold a public
// package: a non-test .go file whose package is not main.
func publicDirs(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == root {
				return nil
			}
			switch d.Name() {
			case "internal", "cmd", "examples", "testdata":
				return filepath.SkipDir
			}
			if strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !isMain(string(src)) {
			seen[filepath.Dir(p)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	dirs := make([]string, 0, len(seen))
	for d := range seen {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	return dirs
}

// isMain reports whether a Go source file declares package main.
func isMain(src string) bool {
	for _, line := range strings.Split(src, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "package" {
			return f[1] == "main"
		}
	}
	return false
}

// isInternal reports whether pkg is an internal package.
func isInternal(pkg *types.Package) bool {
	if pkg == nil {
		return false
	}
	p := pkg.Path()
	return strings.HasPrefix(p, "internal/") || strings.Contains(p, "/internal/") || strings.HasSuffix(p, "/internal")
}

// internalNames returns, for each exported declaration of pkg that names
// an internal type, "pkg.Name: internal/x.T".
func internalNames(pkg *types.Package) []string {
	var out []string
	report := func(where string, t types.Type) {
		for _, n := range internalIn(t, map[types.Type]bool{}) {
			out = append(out, pkg.Name()+"."+where+": "+n)
		}
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Func, *types.Var, *types.Const:
			report(name, obj.Type())
		case *types.TypeName:
			if a, ok := obj.Type().(*types.Alias); ok {
				report(name, a.Rhs())
				continue
			}
			named, ok := obj.Type().(*types.Named)
			if !ok {
				continue
			}
			for i := 0; i < named.TypeParams().Len(); i++ {
				report(name, named.TypeParams().At(i).Constraint())
			}
			report(name, exportedShape(named.Underlying()))
			for i := 0; i < named.NumMethods(); i++ {
				if m := named.Method(i); m.Exported() {
					report(name+"."+m.Name(), m.Type())
				}
			}
		}
	}
	return out
}

// exportedShape returns the part of a type definition "go doc" shows: a
// struct's exported fields, an interface's exported methods and embedded
// types of exported name; any other type as it is.
func exportedShape(u types.Type) types.Type {
	switch u := u.(type) {
	case *types.Struct:
		var fields []*types.Var
		for i := 0; i < u.NumFields(); i++ {
			if f := u.Field(i); f.Exported() {
				fields = append(fields, f)
			}
		}
		return types.NewStruct(fields, nil)
	case *types.Interface:
		var methods []*types.Func
		for i := 0; i < u.NumExplicitMethods(); i++ {
			if m := u.ExplicitMethod(i); m.Exported() {
				methods = append(methods, m)
			}
		}
		var embedded []types.Type
		for i := 0; i < u.NumEmbeddeds(); i++ {
			e := u.EmbeddedType(i)
			if n, ok := e.(interface{ Obj() *types.TypeName }); ok && !n.Obj().Exported() {
				// An unexported alias or type: hidden from go doc, but
				// its exported methods are shown.
				methods = append(methods, exportedMethods(e)...)
				continue
			}
			embedded = append(embedded, e)
		}
		return types.NewInterfaceType(methods, embedded)
	}
	return u
}

// exportedMethods returns the exported methods of interface type t.
func exportedMethods(t types.Type) []*types.Func {
	it, ok := t.Underlying().(*types.Interface)
	if !ok {
		return nil
	}
	var ms []*types.Func
	for i := 0; i < it.NumMethods(); i++ {
		if m := it.Method(i); m.Exported() {
			ms = append(ms, m)
		}
	}
	return ms
}

// internalIn returns the internal types t names, as "path.Name". It does
// not look into the definition of a public named type (its own
// declaration is checked), but it does look through an unexported alias,
// which go doc shows by a name the user cannot resolve.
func internalIn(t types.Type, seen map[types.Type]bool) []string {
	if t == nil || seen[t] {
		return nil
	}
	seen[t] = true
	var out []string
	add := func(ts ...types.Type) {
		for _, x := range ts {
			out = append(out, internalIn(x, seen)...)
		}
	}
	switch t := t.(type) {
	case *types.Alias:
		obj := t.Obj()
		if isInternal(obj.Pkg()) {
			return []string{obj.Pkg().Path() + "." + obj.Name()}
		}
		if !obj.Exported() {
			add(t.Rhs())
		}
		for i := 0; i < t.TypeArgs().Len(); i++ {
			add(t.TypeArgs().At(i))
		}
	case *types.Named:
		obj := t.Obj()
		if isInternal(obj.Pkg()) {
			out = append(out, obj.Pkg().Path()+"."+obj.Name())
		}
		for i := 0; i < t.TypeArgs().Len(); i++ {
			add(t.TypeArgs().At(i))
		}
	case *types.Pointer:
		add(t.Elem())
	case *types.Slice:
		add(t.Elem())
	case *types.Array:
		add(t.Elem())
	case *types.Chan:
		add(t.Elem())
	case *types.Map:
		add(t.Key(), t.Elem())
	case *types.Signature:
		for i := 0; i < t.TypeParams().Len(); i++ {
			add(t.TypeParams().At(i).Constraint())
		}
		for i := 0; i < t.Params().Len(); i++ {
			add(t.Params().At(i).Type())
		}
		for i := 0; i < t.Results().Len(); i++ {
			add(t.Results().At(i).Type())
		}
	case *types.Struct:
		for i := 0; i < t.NumFields(); i++ {
			if f := t.Field(i); f.Exported() {
				add(f.Type())
			}
		}
	case *types.Interface:
		for i := 0; i < t.NumEmbeddeds(); i++ {
			add(t.EmbeddedType(i))
		}
		for i := 0; i < t.NumExplicitMethods(); i++ {
			if m := t.ExplicitMethod(i); m.Exported() {
				add(m.Type())
			}
		}
	case *types.Union:
		for i := 0; i < t.Len(); i++ {
			add(t.Term(i).Type())
		}
	case *types.TypeParam:
		add(t.Constraint())
	}
	return out
}
