package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/store/cold"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// Every flag may come from TALLY_<FLAG>, parsed as the flag parses it.
func TestFlagsFromEnv(t *testing.T) {
	var out bytes.Buffer
	cfg, logs, err := parse(nil, envOf("TALLY_PARTITIONS", "8", "TALLY_JOIN", "false", "TALLY_SYNC", "true",
		"TALLY_HOT_MAX_MEM", "2GB", "TALLY_COLD_AGE", "720h", "TALLY_LOG_FORMAT", "json", "TALLY_LOG_LEVEL", "debug",
		"TALLY_EVENTS_MAX_AGE", "36h", "TALLY_DATA", "/env", "TALLY_PPROF", "true"), &out)
	if err != nil || cfg.Partitions != 8 || cfg.Join || !cfg.SyncWrites || cfg.HotMaxMem != 2e9 || cfg.ColdAge != 720*time.Hour || !cfg.Pprof ||
		logs.format != "json" || logs.level.String() != "DEBUG" || cfg.EventsMaxAge != 36*time.Hour || cfg.DataDir != "/env" {
		t.Fatalf("from the environment: %+v %+v %v", cfg, logs, err)
	}
	cfg, _, err = parse(nil, envOf("TALLY_JOIN", "1", "TALLY_BACKUP_EVERY", "30s"), &out)
	if err != nil || !cfg.Join || cfg.BackupEvery != 30*time.Second {
		t.Fatalf("TALLY_JOIN=1: %v %v", cfg.Join, err)
	}
	cfg, _, err = parse([]string{"--partitions", "4", "--join=false"}, envOf("TALLY_PARTITIONS", "8", "TALLY_JOIN", "true"), &out)
	if err != nil || cfg.Partitions != 4 || cfg.Join {
		t.Fatalf("the command line wins: %d %v %v", cfg.Partitions, cfg.Join, err)
	}
	for _, bad := range [][]string{{"TALLY_JOIN", "maybe"}, {"TALLY_PPROF", "maybe"}, {"TALLY_PARTITIONS", "many"}, {"TALLY_HOT_MAX_MEM", "lots"}, {"TALLY_LOG_LEVEL", "loud"}, {"TALLY_LOG_FORMAT", "xml"}} {
		out.Reset()
		code := run(context.Background(), nil, envOf(bad...), &out)
		if code != 2 || !strings.Contains(out.String(), bad[0]+"=") && bad[0] != "TALLY_LOG_FORMAT" {
			t.Errorf("%s=%s: exit %d, %q", bad[0], bad[1], code, out.String())
		}
	}
	// -h names each flag's variable, so no flag is left without one.
	out.Reset()
	if _, _, err := parse([]string{"-h"}, noEnv, &out); err == nil {
		t.Fatal("-h: no ErrHelp")
	}
	flags := regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(out.String(), -1)
	if len(flags) < 20 {
		t.Fatalf("-h lists %d flags:\n%s", len(flags), out.String())
	}
	for _, f := range flags {
		if f[1] != "version" && !strings.Contains(out.String(), "$"+envName(f[1])+"]") {
			t.Errorf("-h does not name $%s", envName(f[1]))
		}
	}
}

func TestVersionAndJSONLogs(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, noEnv, &out); code != 0 || !strings.HasPrefix(out.String(), "tallyd ") || !strings.Contains(out.String(), "go1.") ||
		!strings.Contains(out.String(), fmt.Sprintf("state layout %d", cold.Layout)) {
		t.Errorf("--version: exit %d, %q", code, out.String())
	}
	out.Reset()
	logConfig{format: "json"}.logger(&out).Info("up", "owned", 3)
	var line map[string]any
	if err := json.Unmarshal(out.Bytes(), &line); err != nil || line["msg"] != "up" || line["owned"] != 3.0 {
		t.Errorf("a JSON log line: %q %v", out.String(), err)
	}
}

// A start prints a handful of lines: one INFO line says what the process owns; each
// partition's loading is at DEBUG.
func TestQuietStart(t *testing.T) {
	var out lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- run(ctx, []string{"--listen", "127.0.0.1:-1", "--data", t.TempDir()}, noEnv, &out) }()
	natstest.Eventually(t, time.Minute, "tallyd up", func() (bool, string) {
		return strings.Contains(out.String(), "tally running"), out.String()
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	start, _, _ := strings.Cut(out.String(), "tally running")
	if n := strings.Count(start, "\n") + 1; n > 5 || strings.Contains(start, "msg=loaded") {
		t.Errorf("%d lines to start:\n%s", n, start)
	}
	if !regexp.MustCompile(`tally running.*partitions=0-15 of=16`).MatchString(out.String()) {
		t.Errorf("the start line does not say what it owns:\n%s", out.String())
	}
}
