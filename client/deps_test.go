package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// An application importing the client links nats.go and the wire types, never the NATS
// server (megabytes of code, and its own dependencies).
func TestClientDoesNotLinkTheServer(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH:", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "github.com/tally-dev/tally/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		if strings.HasPrefix(dep, "github.com/nats-io/nats-server") || strings.Contains(dep, "badger") {
			t.Errorf("client depends on %s", dep)
		}
	}
}
