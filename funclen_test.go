package intellectnode_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the most lines a production function's body may have
// (the lines between its braces). Long functions are split by concern;
// house style keeps the median well under 15.
const maxFuncLines = 60

// funcLenExempt lists what TestFunctionLength does not check yet: whole
// directories (with a trailing slash) and single functions ("file:func" or
// "file:Type.method"). Generated files (a "Code generated ... DO NOT EDIT."
// line) and _test.go files are never checked.
var funcLenExempt = map[string]string{
	"cmd/experiments/bench.go:benchReport": "cmd/experiments is being rewritten onto the DiLoCo loop package",
}

// TestFunctionLength fails on any function of the module's production code
// whose body runs past maxFuncLines lines, outside funcLenExempt.
func TestFunctionLength(t *testing.T) {
	used := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if _, ok := funcLenExempt[path+"/"]; ok {
				used[path+"/"] = true
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		for _, long := range longFuncs(t, path) {
			if _, ok := funcLenExempt[long.name]; ok {
				used[long.name] = true
				continue
			}
			t.Errorf("%s: %d lines, over %d", long.name, long.lines, maxFuncLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k := range funcLenExempt {
		if !used[k] {
			t.Errorf("funcLenExempt lists %s, which is no longer long or no longer there: remove it", k)
		}
	}
}

type longFunc struct {
	name  string // file:func or file:Type.method
	lines int
}

// longFuncs returns the functions of a non-generated file whose bodies run
// past maxFuncLines lines.
func longFuncs(t *testing.T, path string) []longFunc {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	if ast.IsGenerated(f) {
		return nil
	}
	var out []longFunc
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		n := fset.Position(fd.Body.Rbrace).Line - fset.Position(fd.Body.Lbrace).Line - 1
		if n > maxFuncLines {
			out = append(out, longFunc{filepath.ToSlash(path) + ":" + funcName(fd), n})
		}
	}
	return out
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if st, ok := typ.(*ast.StarExpr); ok {
		typ = st.X
	}
	if ix, ok := typ.(*ast.IndexExpr); ok {
		typ = ix.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}
