package main

import (
	"bytes"
	"errors"
	"flag"
	"os/exec"
	"strings"
	"testing"
)

// tallyd injects no faults: the chaos run wraps the publishers of a node it runs
// itself (node.Config.WrapPublisher, hoptest), so no flag of tallyd turns faults on and
// no package made for tests is linked into it.
func TestNoFaultInjection(t *testing.T) {
	var out bytes.Buffer
	if _, _, err := parse([]string{"--test-publish-faults", "fail=0.1"}, noEnv, &out); err == nil {
		t.Fatal("tallyd takes --test-publish-faults")
	}
	out.Reset()
	if _, _, err := parse([]string{"-h"}, noEnv, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	if help := out.String(); strings.Contains(help, "test-") || !strings.Contains(help, "-partitions") {
		t.Fatalf("help shows a test flag or lacks the others:\n%s", help)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH:", err)
	}
	deps, err := exec.Command(gobin, "list", "-deps", "github.com/tally-dev/tally/cmd/tallyd").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, deps)
	}
	for dep := range strings.FieldsSeq(string(deps)) {
		if strings.HasPrefix(dep, "github.com/tally-dev/tally/") && strings.HasSuffix(dep, "test") {
			t.Errorf("tallyd links %s", dep)
		}
	}
}
