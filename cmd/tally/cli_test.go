package main

import (
	"bytes"
	"context"
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

// startTallyd builds tallyd and runs it as a real process on a free port.
func startTallyd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tallyd")
	build := exec.Command("go", "build", "-o", bin, "./cmd/tallyd")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build tallyd: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "--listen", addr, "--data", t.TempDir(), "--partitions", "4", "--flush", "20ms")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("tallyd exit after SIGTERM: %v\n%s", err, logs.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("tallyd did not stop within 30s of SIGTERM\n%s", logs.String())
		}
	})
	url := "nats://" + addr
	waitFor(t, "tallyd healthy", func() (bool, string) {
		code, out, errOut := tally(t, "", "health", "--server", url)
		return code == 0, out + errOut
	})
	return url
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
	url := startTallyd(t)
	s := []string{"--server", url}
	if code, _, errOut := tally(t, "", append([]string{"pub", filepath.Join("..", "..", "testdata", "likes.ndjson")}, s...)...); code != 0 {
		t.Fatalf("pub: exit %d: %s", code, errOut)
	}
	// Likes of 42: 7 and 8 (8 twice, counted once); 9 liked and unliked; 10's unlike of nothing.
	want := "id  like  repost  comment  view\n42  2     1       1        10\n43  0     0       0        1\n"
	waitFor(t, "counts of 42 and 43", func() (bool, string) {
		_, out, errOut := tally(t, "", append([]string{"get", "post", "42", "43"}, s...)...)
		return out == want, out + errOut
	})
	f := func(want string, args ...string) {
		t.Helper()
		code, out, errOut := tally(t, "", append(args, s...)...)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("tally %v: exit %d, out %q, err %q, want %q", args, code, out, errOut, want)
		}
	}
	f("42\ttrue\n43\tfalse\n", "liked", "8", "42", "43")
	f("8\t", "likes", "post", "42")
	// The owner was notified of three likes (9's unlike takes no notification back).
	f("3    1        0        3     0   0       0", "unread", "3")
	f("ok:", "health")

	// Errors: a malformed line names its number; a bad id and an unknown command are usage errors.
	code, _, errOut := tally(t, "{\"type\":\"view\",\"post\":1}\n{\"type\":\"like\",\"uid\":1}\n", append([]string{"pub"}, s...)...)
	if code != 1 || !strings.Contains(errOut, "line 2") {
		t.Fatalf("bad line: exit %d, %q", code, errOut)
	}
	if code, _, _ := tally(t, "", append([]string{"get", "post", "x"}, s...)...); code != 2 {
		t.Fatalf("bad id: exit %d, want 2", code)
	}
	if code, _, _ := tally(t, "", "frobnicate"); code != 2 {
		t.Fatalf("unknown command: exit %d, want 2", code)
	}
	if code, _, errOut := tally(t, "", append([]string{"get", "video", "1"}, s...)...); code != 1 || !strings.Contains(errOut, "unknown family") {
		t.Fatalf("unknown family: exit %d, %q", code, errOut)
	}

	// watch prints the change events of new events.
	o := &syncWriter{}
	var e bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- run(ctx, append([]string{"watch", "post"}, s...), env{stdin: strings.NewReader(""), stdout: o, stderr: &e, getenv: os.Getenv})
	}()
	time.Sleep(200 * time.Millisecond) // let the watch subscribe; what it missed is not replayed
	tally(t, `{"type":"view","post":4242,"n":5}`+"\n", append([]string{"pub"}, s...)...)
	waitFor(t, "a change event for 4242", func() (bool, string) {
		out := o.String()
		return strings.Contains(out, `"id":4242`) && strings.Contains(out, `"view":5`), out
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("watch exit %d: %s", code, e.String())
	}

	f("counts: exact", "bench", "--events", "20000", "--ids", "500", "--queries", "200")
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
