package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

// The chaos test's switch: a hidden flag (or TALLY_TEST_PUBLISH_FAULTS) that -h does not
// show, while every other flag is still listed.
func TestHiddenPublishFaults(t *testing.T) {
	var out bytes.Buffer
	cfg, _, err := parse([]string{"--test-publish-faults", "fail=0.1,lose=0.01,acktimeout=500ms,seed=3"}, noEnv, &out)
	if err != nil || cfg.PublishFaults != "fail=0.1,lose=0.01,acktimeout=500ms,seed=3" {
		t.Fatalf("flag: %q %v", cfg.PublishFaults, err)
	}
	env := func(k string) string { return map[string]string{"TALLY_TEST_PUBLISH_FAULTS": "reorder=0.2"}[k] }
	if cfg, _, err = parse(nil, env, &out); err != nil || cfg.PublishFaults != "reorder=0.2" {
		t.Fatalf("env: %q %v", cfg.PublishFaults, err)
	}
	if cfg, _, err = parse(nil, noEnv, &out); err != nil || cfg.PublishFaults != "" {
		t.Fatalf("default: %q %v", cfg.PublishFaults, err)
	}
	out.Reset()
	if _, _, err := parse([]string{"-h"}, noEnv, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	if help := out.String(); strings.Contains(help, "test-") || !strings.Contains(help, "-partitions") || !strings.Contains(help, "(default 16)") {
		t.Fatalf("help shows a hidden flag or lacks the others:\n%s", help)
	}
}
