package rig

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/tally-dev/tally"

// testOnly reports whether pkg is one of the packages only tests may link: the system
// tests, their rig and the reference model of the rules.
func testOnly(pkg string) bool {
	return pkg == module+"/stages/systest" || strings.HasPrefix(pkg, module+"/stages/systest/") ||
		pkg == module+"/stages/reference"
}

// TestProductionDoesNotLinkTheRig: tallyd, the CLI and every other package of the
// module outside the test-only ones link neither the rig nor the reference model (their
// tests may).
func TestProductionDoesNotLinkTheRig(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH:", err)
	}
	out, err := exec.Command(gobin, "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	tallyd := false
	for line := range strings.Lines(string(out)) {
		pkg, deps, _ := strings.Cut(strings.TrimSpace(line), " ")
		tallyd = tallyd || pkg == module+"/cmd/tallyd"
		if testOnly(pkg) {
			continue
		}
		for dep := range strings.FieldsSeq(deps) {
			if testOnly(dep) {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
	if !tallyd {
		t.Fatalf("go list did not list cmd/tallyd:\n%s", out)
	}
}
