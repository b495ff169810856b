package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline/natstest"
)

// A version given at link time (-ldflags -X, as the Dockerfile and .goreleaser.yaml
// build) is what tallyd --version, tally version and tally_build_info say, where a build
// without VCS information (the image's) said "(devel)". The stream flags reach the
// events stream, as its tally_stream_max_bytes shows.
func TestVersionFromLdflags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tallyd and tally")
	}
	const v = "v9.8.7-test"
	dir := t.TempDir()
	build := exec.Command("go", "build", "-ldflags", "-X github.com/tally-dev/tally/pipeline/buildinfo.version="+v,
		"-o", dir+string(filepath.Separator), "./cmd/tallyd", "./cmd/tally")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, c := range [][]string{{"tallyd", "--version"}, {"tally", "version"}} {
		out, err := exec.Command(filepath.Join(dir, c[0]), c[1:]...).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), c[0]+" "+v+" ") {
			t.Errorf("%v: %q %v, want it to start with %q", c, out, err, c[0]+" "+v)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metrics := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "tallyd"), "--data", t.TempDir(), "--listen", "127.0.0.1:-1", "--partitions", "2", "--metrics", metrics,
		"--events-max-bytes", "1GiB", "--events-compression", "s2")
	var logs lockedBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	want := `version="` + v + `"`
	var body []byte
	natstest.Eventually(t, time.Minute, "tally_build_info on /metrics", func() (bool, string) {
		resp, err := http.Get("http://" + metrics + "/metrics")
		if err != nil {
			return false, err.Error() + "; logs:\n" + logs.String()
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		return bytes.Contains(body, []byte("tally_build_info{")), "logs:\n" + logs.String()
	})
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "tally_build_info{") && !strings.Contains(line, want) {
			t.Errorf("%s, want %s", line, want)
		}
	}
	// --events-max-bytes made the new events stream, and tally_stream_max_bytes says so.
	if !bytes.Contains(body, []byte(`tally_stream_max_bytes{stream="TALLY_EVENTS"} 1.073741824e+09`)) || !bytes.Contains(body, []byte(`tally_stream_bytes{stream="TALLY_LOG"}`)) {
		t.Errorf("no tally_stream_max_bytes of 1GiB for TALLY_EVENTS:\n%s", grepLines(body, "tally_stream_"))
	}
}

func grepLines(body []byte, prefix string) string {
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// Without a version at link time, the module version Go recorded is shown.
func TestVersionOfABuild(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, noEnv, &out); code != 0 || !strings.HasPrefix(out.String(), "tallyd ") ||
		!strings.Contains(out.String(), "state layout ") || !strings.Contains(out.String(), " go1.") {
		t.Fatalf("--version: exit %d, %q", code, out.String())
	}
}
