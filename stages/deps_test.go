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

// The database knows the store packages that write through it (store/graph,
// store/checkpoint, store/stagelog, store/unread…) by their keys alone, named in
// store/internal/keys: store/cold depends on none of them, so that each imports it.
func TestColdDependsOnNoOtherStorePackage(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH:", err)
	}
	const module = "github.com/tally-dev/tally/"
	out, err := exec.Command(gobin, "list", "-f", `{{join .Deps " "}}`, module+"store/cold").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		if strings.HasPrefix(dep, module) && dep != module+"store/internal/keys" {
			t.Errorf("store/cold depends on %s", dep)
		}
	}
}
