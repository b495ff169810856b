package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline/natstest"
)

// buildBinaries builds tallyd and tally into a temporary directory.
func buildBinaries(t *testing.T) (tallyd, tally string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..")) // cmd/tally is two levels down
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found from %s: %v", root, err)
	}
	dir := t.TempDir()
	args := append(append([]string{"build"}, raceFlags()...), "-o", dir+string(filepath.Separator), "./cmd/tallyd", "./cmd/tally")
	build := exec.Command("go", args...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "tallyd"), filepath.Join(dir, "tally")
}

// daemon is a tallyd running as a real process.
type daemon struct {
	url    string
	cmd    *exec.Cmd
	exited chan error
	logs   *syncWriter
}

// startTallyd runs tallyd on a free port and waits until it reports healthy.
func startTallyd(t *testing.T, bin string) *daemon {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	d := &daemon{url: "nats://" + addr, exited: make(chan error, 1), logs: &syncWriter{}}
	d.cmd = exec.Command(bin, "--listen", addr, "--data", t.TempDir(), "--partitions", "4", "--flush", "20ms")
	d.cmd.Stderr = d.logs
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.exited <- d.cmd.Wait() }()
	t.Cleanup(func() { // whatever happened, leave no process behind
		_ = d.cmd.Process.Kill()
		<-d.exited
		d.exited <- nil
	})
	waitFor(t, "tallyd healthy", func() (bool, string) {
		select {
		case err := <-d.exited:
			d.exited <- err
			t.Fatalf("tallyd exited early: %v\n%s", err, d.logs)
		default:
		}
		code, out, errOut := tally(t, "", "health", "--server", d.url)
		return code == 0, out + errOut
	})
	return d
}

// stop sends SIGTERM and expects a clean exit (code 0) within a deadline.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.exited:
		d.exited <- err
		if err != nil {
			t.Fatalf("tallyd exit after SIGTERM: %v\n%s", err, d.logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("tallyd did not stop within 30s of SIGTERM\n%s", d.logs)
	}
}

// tallyBin runs the built tally binary.
func tallyBin(t *testing.T, bin string, stdin io.Reader, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var o, e bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &o, &e
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("tally %v: %v", args, err)
	}
	return code, o.String(), e.String()
}

// tally runs one CLI command in-process.
func tally(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code = run(ctx, args, env{stdin: strings.NewReader(stdin), stdout: &o, stderr: &e, getenv: func(string) string { return "" }})
	return code, o.String(), e.String()
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	natstest.Eventually(t, 60*time.Second, what, cond)
}

func TestCLIAgainstTallyd(t *testing.T) {
	tallydBin, tallyPath := buildBinaries(t)
	d := startTallyd(t, tallydBin)
	s := []string{"--server", d.url}

	// The real binary, fed on stdin.
	f, err := os.Open(filepath.Join("..", "..", "testdata", "likes.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if code, _, errOut := tallyBin(t, tallyPath, f, append([]string{"pub"}, s...)...); code != 0 || !strings.Contains(errOut, "published 10 events") {
		t.Fatalf("pub: exit %d: %s", code, errOut)
	}
	// Likes of 42: 7 and 8 (8 twice, counted once); 9 liked and unliked; 10's unlike of nothing.
	want := "id  like  repost  comment  view\n42  2     1       1        10\n43  0     0       0        1\n"
	waitFor(t, "counts of 42 and 43", func() (bool, string) {
		_, out, errOut := tally(t, "", append([]string{"get", "post", "42", "43"}, s...)...)
		return out == want, out + errOut
	})
	check := func(want string, args ...string) {
		t.Helper()
		code, out, errOut := tally(t, "", append(args, s...)...)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("tally %v: exit %d, out %q, err %q, want %q", args, code, out, errOut, want)
		}
	}
	check(`{"fields":["like","repost","comment","view"],"counts":[[2,1,1,10]]}`, "get", "--json", "post", "42")
	// The common flags stand before the command as well as after it, as the usage says.
	if code, out, errOut := tallyBin(t, tallyPath, nil, append(s, "get", "post", "42", "43")...); code != 0 || out != want {
		t.Fatalf("common flags before the command: exit %d, out %q, err %q", code, out, errOut)
	}
	if code, _, errOut := tallyBin(t, tallyPath, nil, append(s, "--limit", "5", "likes", "post", "42")...); code != 2 || !strings.Contains(errOut, "-limit") {
		t.Fatalf("a command's flag before it: exit %d, want 2: %q", code, errOut)
	}
	check("42\ttrue\n43\tfalse\n", "liked", "8", "42", "43")
	check("8\t", "likes", "post", "42")
	check("42\t", "likes", "user", "7", "--limit", "5")
	// The owner was notified of three likes, and 9's unlike took its notification back.
	check("3    1        0        2     0   0       0", "unread", "3")
	check(`{"ok":true,`, "health")

	// Errors: a malformed line names its number; a bad id and an unknown command are usage errors.
	code, _, errOut := tallyBin(t, tallyPath, strings.NewReader("{\"type\":\"view\",\"post\":1}\n{\"type\":\"like\",\"uid\":1}\n"), append([]string{"pub"}, s...)...)
	if code != 1 || !strings.Contains(errOut, "line 2") {
		t.Fatalf("bad line: exit %d, %q", code, errOut)
	}
	code, _, errOut = tally(t, "{\"type\":\"view\",\"post\":1}\nnot json\n\n{\"type\":\"view\",\"post\":1}\n", append([]string{"pub", "--skip-bad", "--batch", "1"}, s...)...)
	if code != 0 || !strings.Contains(errOut, "line 2") || !strings.Contains(errOut, "published 2 events") || !strings.Contains(errOut, "skipped 1") {
		t.Fatalf("--skip-bad: exit %d, %q", code, errOut)
	}
	if code, _, _ := tally(t, "", append([]string{"get", "post", "x"}, s...)...); code != 2 {
		t.Fatalf("bad id: exit %d, want 2", code)
	}
	if code, _, errOut := tallyBin(t, tallyPath, nil, "frobnicate"); code != 2 || !strings.Contains(errOut, "unknown command") {
		t.Fatalf("unknown command: exit %d, want 2: %q", code, errOut)
	}
	if code, _, errOut := tally(t, "", append([]string{"get", "video", "1"}, s...)...); code != 1 || !strings.Contains(errOut, "unknown family") {
		t.Fatalf("unknown family: exit %d, %q", code, errOut)
	}
	// A window or a limit no tallyd takes is the user's mistake, told before asking.
	for _, args := range [][]string{{"get", "--window", "2h", "post", "42"}, {"top", "--window", "1w", "post", "like"}, {"top", "--limit", "5000", "post", "like"}, {"likes", "post", "42", "--limit", "-3"}} {
		if code, _, errOut := tally(t, "", append(args, s...)...); code != 2 || !strings.Contains(errOut, "usage") {
			t.Fatalf("tally %v: exit %d, want 2: %q", args, code, errOut)
		}
	}
	// A watch of a family nobody counts says so rather than wait for changes that never come.
	if code, _, errOut := tallyBin(t, tallyPath, nil, append([]string{"watch", "video"}, s...)...); code != 2 || !strings.Contains(errOut, "unknown family") {
		t.Fatalf("watch of an unknown family: exit %d, %q", code, errOut)
	}

	// watch prints the change events of new events. It sees only what happens after it
	// subscribed, so keep publishing until one shows up.
	o := &syncWriter{}
	var e bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- run(ctx, append([]string{"watch", "post"}, s...), env{stdin: strings.NewReader(""), stdout: o, stderr: &e, getenv: os.Getenv})
	}()
	waitFor(t, "a change event for 4242", func() (bool, string) {
		tally(t, `{"type":"view","post":4242,"n":5}`+"\n", append([]string{"pub"}, s...)...)
		out := o.String()
		return strings.Contains(out, `"id":4242`) && strings.Contains(out, `"view":`), out
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("watch exit %d: %s", code, e.String())
	}

	check("counts: exact", "bench", "--events", "20000", "--ids", "500", "--queries", "200")

	d.stop(t)
	if !strings.Contains(d.logs.String(), "tally running") {
		t.Errorf("tallyd logs lack the start line:\n%s", d.logs)
	}
}

func TestNDJSON(t *testing.T) {
	r := newNDJSON(strings.NewReader("\n{\"type\":\"view\",\"post\":\"9\"}\n  \n{\"uid\":1,\"post\":2}\n{\"type\":\"like\",\"uid\":1,\"post\":2,\"x\":1}\n"))
	e, err := r.next()
	if err != nil || e.Type != "view" || e.Post != 9 || r.line != 2 {
		t.Fatalf("first event: %+v line %d %v", e, r.line, err)
	}
	if _, err := r.next(); err == nil || !strings.Contains(err.Error(), "line 4") || !strings.Contains(err.Error(), "missing type") {
		t.Fatalf("missing type: %v", err)
	}
	if _, err := r.next(); err == nil || !strings.Contains(err.Error(), "line 5") || !strings.Contains(err.Error(), "unknown field") {
		t.Fatalf("unknown field: %v", err)
	}
}

// syncWriter lets the test read what a concurrently running command wrote.
type syncWriter struct {
	mu sync.Mutex
	w  bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}
