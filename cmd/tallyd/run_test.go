package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func noEnv(string) string { return "" }

func TestParse(t *testing.T) {
	var out bytes.Buffer
	cfg, _, err := parse([]string{"--data", "/x", "--partitions", "4", "--flush", "20ms", "--metrics", "127.0.0.1:0"}, noEnv, &out)
	if err != nil || cfg.DataDir != "/x" || cfg.Partitions != 4 || cfg.FlushInterval != 20*time.Millisecond || cfg.Metrics != "127.0.0.1:0" {
		t.Fatalf("parse: %+v %v", cfg, err)
	}
	env := func(k string) string { return map[string]string{"TALLY_DATA": "/env", "TALLY_NATS": "nats://a:1"}[k] }
	cfg, _, err = parse(nil, env, &out)
	if err != nil || cfg.DataDir != "/env" || cfg.NATSURL != "nats://a:1" {
		t.Fatalf("env: %+v %v", cfg, err)
	}
	cfg, _, err = parse([]string{"--hot-max-mem", "1.5GiB", "--cold-age", "720h"}, noEnv, &out)
	if err != nil || cfg.HotMaxMem != 3<<29 || cfg.ColdAge != 720*time.Hour {
		t.Fatalf("tiers: %+v %v", cfg, err)
	}
	cfg, _, err = parse(nil, func(k string) string { return map[string]string{"TALLY_HOT_MAX_MEM": "2GB"}[k] }, &out)
	if err != nil || cfg.HotMaxMem != 2e9 {
		t.Fatalf("TALLY_HOT_MAX_MEM: %d %v", cfg.HotMaxMem, err)
	}
	for _, bad := range [][]string{{"--partitions", "0"}, {"--flush", "1ns"}, {"--log-level", "loud"}, {"extra"}, {"--nope"}, {"--hot-max-mem", "lots"}, {"--hot-max-mem", "-1GiB"},
		{"--max-mem", "lots"}, {"--max-mem", "-1GiB"}, {"--max-mem", "100MiB"}} {
		if _, _, err := parse(bad, noEnv, &out); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

// --max-mem is a size, TALLY_MAX_MEM too; 0, the default, is sized from the machine; a
// budget too small for a process stops tallyd with exit code 2, saying the least.
func TestParseMaxMem(t *testing.T) {
	var out bytes.Buffer
	for _, c := range []struct {
		args []string
		env  func(string) string
		want int64
	}{
		{[]string{"--max-mem", "2GiB"}, noEnv, 2 << 30},
		{[]string{"--max-mem", "1.5GB", "--hot-max-mem", "512MiB"}, noEnv, 1.5e9},
		{nil, envOf("TALLY_MAX_MEM", "1.5GiB"), 3 << 29},
		{[]string{"--max-mem", "3GiB"}, envOf("TALLY_MAX_MEM", "2GiB"), 3 << 30},
	} {
		cfg, _, err := parse(c.args, c.env, &out)
		if err != nil || cfg.MaxMem != c.want {
			t.Errorf("%v: max-mem %d %v, want %d", c.args, cfg.MaxMem, err, c.want)
		}
	}
	if cfg, _, err := parse(nil, noEnv, &out); err != nil || cfg.MaxMem != 0 {
		t.Errorf("from the machine: max-mem %d %v, want 0", cfg.MaxMem, err)
	}
	for _, bad := range []struct{ args, env []string }{{[]string{"--max-mem", "100MiB"}, nil}, {nil, []string{"TALLY_MAX_MEM", "256MiB"}},
		{[]string{"--max-mem", "2GiB"}, []string{"TALLY_MAX_MEM", "lots"}}, {[]string{"--max-mem", "-1"}, nil}} {
		out.Reset()
		code := run(context.Background(), bad.args, envOf(bad.env...), &out)
		if code != 2 || !strings.Contains(out.String(), "max-mem") && !strings.Contains(out.String(), "MAX_MEM") {
			t.Errorf("%v %v: exit %d, %q", bad.args, bad.env, code, out.String())
		}
	}
	out.Reset()
	if code := run(context.Background(), []string{"--max-mem", "100MiB"}, noEnv, &out); code != 2 || !strings.Contains(out.String(), "100MiB is below the ") {
		t.Errorf("the least budget is not named: exit %d, %q", code, out.String())
	}
}

// Bad configurations stop tallyd with a clear message and a non-zero exit.
func TestRunFailsClearly(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--data", t.TempDir(), "--listen", busy.Addr().String()}, "address already in use"},
		{[]string{"--data", filepath.Join(file, "sub"), "--listen", "127.0.0.1:-1"}, "not a directory"},
		{[]string{"--table", "btree", "--listen", "127.0.0.1:-1"}, "unknown table"},
		{[]string{"--pprof", "--data", t.TempDir(), "--listen", "127.0.0.1:-1"}, "--pprof needs --metrics"},
	} {
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		code := run(ctx, c.args, noEnv, &out)
		cancel()
		if code == 0 || !strings.Contains(out.String(), c.want) {
			t.Errorf("%v: exit %d, output %q, want it to contain %q", c.args, code, out.String(), c.want)
		}
	}
}

// The events stream's size and compression are flags and TALLY_ variables; unset, they
// keep the stream's (0 and "").
func TestParseStreamFlags(t *testing.T) {
	var out bytes.Buffer
	f := func(args []string, env func(string) string, bytes int64, comp string) {
		t.Helper()
		cfg, _, err := parse(args, env, &out)
		if err != nil || cfg.EventsMaxBytes != bytes || cfg.EventsCompression != comp {
			t.Errorf("%v: max bytes %d, compression %q, %v; want %d, %q", args, cfg.EventsMaxBytes, cfg.EventsCompression, err, bytes, comp)
		}
	}
	f(nil, noEnv, 0, "")
	f([]string{"--events-max-bytes", "50GiB", "--events-compression", "s2"}, noEnv, 50<<30, "s2")
	f([]string{"--events-max-bytes", "-1"}, envOf("TALLY_EVENTS_COMPRESSION", "none"), -1, "none")
	f(nil, envOf("TALLY_EVENTS_MAX_BYTES", "1GB"), 1e9, "")
	for _, bad := range [][]string{{"--events-compression", "zstd"}, {"--events-max-bytes", "lots"}, {"--events-max-bytes", "-2"}} {
		if _, _, err := parse(bad, noEnv, &out); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

// The cold tier's compression is a flag and a TALLY_ variable: none unless snappy is
// asked for, and nothing else is taken.
func TestParseColdCompression(t *testing.T) {
	var out bytes.Buffer
	for _, c := range []struct {
		args []string
		env  func(string) string
		want string
	}{
		{nil, noEnv, ""},
		{[]string{"--cold-compression", "snappy"}, noEnv, "snappy"},
		{nil, envOf("TALLY_COLD_COMPRESSION", "none"), "none"},
	} {
		cfg, _, err := parse(c.args, c.env, &out)
		if err != nil || cfg.ColdCompression != c.want {
			t.Errorf("%v: compression %q, %v; want %q", c.args, cfg.ColdCompression, err, c.want)
		}
	}
	if _, _, err := parse([]string{"--cold-compression", "zstd"}, noEnv, &out); err == nil {
		t.Error("--cold-compression zstd: accepted")
	}
}
