package main

import (
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wireTables are the packages whose doc has a table of the wire names they
// export, under heading, and the prefixes of the constants' names the
// table lists.
var wireTables = []struct {
	dir, heading string
	prefixes     []string
}{
	{"dlq", "Metadata keys", []string{"Key"}},
	{"delivery", "Metadata keys", []string{"Key"}},
	{"middleware", "Telemetry names", []string{"ScopeName", "Metric", "Attr", "Link"}},
	{"dlq/archive", "Metrics", []string{"Metric"}},
}

// TestWireNamesTables holds each package doc's table of wire names (the
// metadata keys, the metric and span attribute names) to the package's
// exported constants, both ways: every row of the table names a constant
// of that value, and every constant is in the table with its value. A
// table row is a tab-indented line "value  Name: what it is" (a line
// indented further continues the one above).
func TestWireNamesTables(t *testing.T) {
	root := moduleRoot(t)
	module := modulePath(t, root)
	paths := make([]string, len(wireTables))
	for i, w := range wireTables {
		paths[i] = module + "/" + w.dir
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", exportData(t, root, paths))
	for i, w := range wireTables {
		t.Run(w.dir, func(t *testing.T) {
			pkg, err := imp.Import(paths[i])
			if err != nil {
				t.Fatal(err)
			}
			consts := wireConsts(pkg, w.prefixes)
			if len(consts) == 0 {
				t.Fatalf("no constant named %v in %s", w.prefixes, w.dir)
			}
			rows := docTable(t, filepath.Join(root, w.dir), w.heading)
			if len(rows) == 0 {
				t.Fatalf("no table under %q in the doc of %s", w.heading, w.dir)
			}
			listed := map[string]bool{}
			for _, r := range rows {
				listed[r.name] = true
				v, ok := consts[r.name]
				switch {
				case !ok:
					t.Errorf("the table lists %s (%q), which is no exported constant", r.name, r.value)
				case v != r.value:
					t.Errorf("the table gives %s as %q, the constant is %q", r.name, r.value, v)
				}
			}
			for name, v := range consts {
				if !listed[name] {
					t.Errorf("%s (%q) is missing from the table", name, v)
				}
			}
		})
	}
}

// wireConsts returns the exported string constants of pkg whose names
// start with one of prefixes, by name.
func wireConsts(pkg *types.Package, prefixes []string) map[string]string {
	out := map[string]string{}
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok || !c.Exported() || c.Val().Kind() != constant.String {
			continue
		}
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				out[name] = constant.StringVal(c.Val())
				break
			}
		}
	}
	return out
}

type wireRow struct{ value, name string }

// docTable returns the rows of the table under "# heading" in the package
// doc of the package in dir.
func docTable(t *testing.T, dir, heading string) []wireRow {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil {
			doc = f.Doc.Text()
			break
		}
	}
	var rows []wireRow
	in := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "# ") {
			in = line == "# "+heading
			continue
		}
		if !in || !strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "\t ") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasSuffix(f[1], ":") {
			t.Errorf("%s: table row %q is not \"value  Name: what\"", dir, line)
			continue
		}
		rows = append(rows, wireRow{value: f[0], name: strings.TrimSuffix(f[1], ":")})
	}
	return rows
}
