package stages_test

import (
	"os/exec"
	"strings"
	"testing"
)

// Badger is the store's business: no package of Tally outside store/ imports it, so the
// stages see transactions and errors of the store (cold.Txn, cold.ErrTxnTooBig) and a
// change of database touches store/ alone.
func TestOnlyTheStoreImportsBadger(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH:", err)
	}
	const module = "github.com/tally-dev/tally/"
	out, err := exec.Command(gobin, "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`,
		module+"stages/...", module+"cmd/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		pkg, imports, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !strings.HasPrefix(pkg, module) || strings.HasPrefix(pkg, module+"store/") {
			continue
		}
		for imp := range strings.FieldsSeq(imports) {
			if strings.HasPrefix(imp, "github.com/dgraph-io/badger") {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
}
