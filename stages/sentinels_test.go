package stages_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Every sentinel error of a package — a package-level variable made by errors.New or
// fmt.Errorf — is in the package's errors.go and documented, as nats.go's
// jetstream/errors.go has them: a caller finds what to match with errors.Is in one place.
func TestSentinelsInErrorsGo(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH:", err)
	}
	const module = "github.com/tally-dev/tally/"
	out, err := exec.Command(gobin, "list", "-f", `{{.Dir}} {{join .GoFiles " "}}`,
		module+"stages/...", module+"pipeline/...", module+"cmd/...", module+"client/...", module+"store/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	fset := token.NewFileSet()
	for line := range strings.Lines(string(out)) {
		dir, files, _ := strings.Cut(strings.TrimSpace(line), " ")
		for name := range strings.FieldsSeq(files) {
			path := filepath.Join(dir, name)
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.VAR {
					continue
				}
				for _, s := range g.Specs {
					vs := s.(*ast.ValueSpec)
					for i, v := range vs.Values {
						if !madeError(v) || i >= len(vs.Names) {
							continue
						}
						where := fset.Position(vs.Pos())
						if name != "errors.go" {
							t.Errorf("%s:%d: sentinel %s is not in the package's errors.go", where.Filename, where.Line, vs.Names[i].Name)
						}
						if vs.Doc == nil && (g.Doc == nil || g.Lparen.IsValid()) {
							t.Errorf("%s:%d: sentinel %s is not documented", where.Filename, where.Line, vs.Names[i].Name)
						}
					}
				}
			}
		}
	}
}

// madeError reports whether e is a call of errors.New or fmt.Errorf.
func madeError(e ast.Expr) bool {
	c, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && (pkg.Name == "errors" && sel.Sel.Name == "New" || pkg.Name == "fmt" && sel.Sel.Name == "Errorf")
}
