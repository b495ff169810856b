package systest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/embedded"
	"github.com/tally-dev/tally/stages/systest/rig"
)

// A child started with TALLY_DISK_FSIZE limits, on SIGUSR1, the size any file of the
// process may grow to (RLIMIT_FSIZE), with SIGXFSZ ignored so that writes past it fail
// with EFBIG, as on a full disk. The limit cannot be set before the start: Badger opens
// a sparse 64 MiB memtable and a 2 GiB value log, which no "few MB" limit allows; once
// they exist, the limit makes the next memtable or table file fail, which is where a
// full disk hits a running Tally.
func init() {
	v := os.Getenv("TALLY_DISK_FSIZE")
	if v == "" || os.Getenv("TALLY_CRASH_CHILD") == "" {
		return
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		panic(err)
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		<-usr1
		signal.Ignore(syscall.SIGXFSZ)
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			fmt.Fprintln(os.Stderr, "child: setrlimit:", err)
			os.Exit(3)
		}
		fmt.Fprintln(os.Stderr, "child: file size limit set")
	}()
}

// diskChild is a Tally child process (TestMain's harness) whose stderr can be read
// while it runs.
type diskChild struct {
	t      *testing.T
	dir    string
	listen string
	cred   *syscall.Credential
	env    []string // given at every start
	cmd    *exec.Cmd
	stderr *rig.LogBuffer
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

func (c *diskChild) start(env ...string) {
	c.t.Helper()
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(append(append(os.Environ(), "TALLY_CRASH_CHILD="+c.dir, "TALLY_CRASH_LISTEN="+c.listen), c.env...), env...)
	if c.cred != nil {
		c.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	c.stderr = &rig.LogBuffer{}
	c.cmd.Stderr = c.stderr
	if err := c.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.exited = make(chan struct{})
	go func() {
		c.err = c.cmd.Wait()
		close(c.exited)
	}()
}

// stop kills the child if it still runs.
func (c *diskChild) stop() {
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
}

// waitExit returns the child's exit code, failing the test if it is still running
// after d (a hang).
func (c *diskChild) waitExit(d time.Duration) int {
	c.t.Helper()
	select {
	case <-c.exited:
	case <-time.After(d):
		c.stop()
		c.t.Fatalf("the child did not exit within %v:\n%s", d, c.stderr.String())
	}
	if c.err == nil {
		return 0
	}
	if ee, ok := c.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	c.t.Fatal(c.err)
	return -1
}

func (c *diskChild) running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

func natsConn(t *testing.T, listen string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect("nats://"+listen, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func diskClient(t *testing.T, listen string) *client.Client {
	t.Helper()
	c, err := client.New(natsConn(t, listen), client.WithPartitions(8), client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// publishUntil sends evs under tx, retrying with the same tx, until it is acknowledged
// (true) or stop says to give up (false: it may or may not have been stored, and must
// be sent again with the same tx).
func publishUntil(t *testing.T, c *client.Client, tx string, evs []pipeline.Event, stop func() bool) bool {
	t.Helper()
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := c.PublishBatch(ctx, tx, evs)
		cancel()
		if err == nil {
			return true
		}
		if stop() {
			return false
		}
		if attempt > 300 {
			t.Fatalf("%s never stored: %v", tx, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDiskFull runs Tally as a child process, limits the size its files may grow to
// (RLIMIT_FSIZE: writes fail with EFBIG, as on a full disk) once it runs, and feeds it
// events until Badger cannot write. The child must exit non-zero, promptly, saying that
// its data directory cannot be written; started again without the limit, every count
// must equal the reference: nothing lost, nothing counted twice.
//
// The child runs on a NATS server of the test's own, which takes payloads of at most
// 60 KiB: Tally then keeps its event stages' outboxes in Badger (below 64 KiB, see
// node's minLogPayload) rather than in their logs in NATS, so that the dead letters of
// malformed messages fill Badger in seconds. (Kept in the log, every outbox goes to
// NATS, and Badger fills only with relations, at ~100 bytes an event.)
func TestDiskFull(t *testing.T) {
	const limit = 16 << 20 // below Badger's next memtable
	s, err := embedded.Start(embedded.Config{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir(), MaxPayload: 60 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	server := strings.TrimPrefix(s.ClientURL(), "nats://")
	ch := &diskChild{t: t, dir: t.TempDir(), listen: rig.FreeAddr(t), env: []string{"TALLY_CRASH_ALONE_NATS=" + s.ClientURL()}}
	ch.start("TALLY_DISK_FSIZE=" + strconv.Itoa(limit))
	t.Cleanup(func() {
		ch.stop()
		if t.Failed() {
			t.Logf("last child stderr:\n%s", ch.stderr.String())
		}
	})
	c := diskClient(t, server)
	rig.WaitCaughtUp(t, c)
	_ = ch.cmd.Process.Signal(syscall.SIGUSR1)
	rig.Eventually(t, "file size limit set", func() (bool, string) {
		return strings.Contains(ch.stderr.String(), "file size limit set"), ""
	})
	start := time.Now()

	g := &gen{r: rand.New(rand.NewPCG(41, 42)), users: 3000, posts: 3000}
	var pending []pipeline.Event // a batch the child may have died with, unacknowledged
	pendingTx := ""
	chunk := 0
	// Badger fails when it needs a new memtable, after 32 MiB of writes. Besides the
	// random log, malformed messages of 40 KB are sent, 20 a chunk: each is
	// dead-lettered through the outbox, so Badger stores its ~55 KB dead-letter entry,
	// and fills in seconds.
	nc := natsConn(t, server)
	js, _ := jetstream.New(nc)
	junk := make([]byte, 40<<10)
	for i := range junk {
		junk[i] = byte(g.r.IntN(256))
	}
	junk[0] = 0xc1 // never used by MessagePack, and not JSON
	for ch.running() {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("Badger still writing after %v and %d chunks", time.Since(start), chunk)
		}
		evs := make([]pipeline.Event, 300)
		for i := range evs {
			evs[i] = g.event()
		}
		tx := "disk." + strconv.Itoa(chunk)
		chunk++
		if !publishUntil(t, c, tx, evs, func() bool { return !ch.running() }) {
			pending, pendingTx = evs, tx
			break
		}
		for i := range 20 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, _ = js.Publish(ctx, c.Subjects().Event("like", pipeline.ID(chunk)), junk, jetstream.WithMsgID(tx+".junk."+strconv.Itoa(i)))
			cancel()
		}
	}
	code := ch.waitExit(30 * time.Second)
	failed := time.Since(start)
	stderr := ch.stderr.String()
	t.Logf("child exited %d %v after the limit, %d chunks; stderr ends:\n%s", code, failed, chunk, rig.Tail(stderr, 6))
	if code == 0 {
		t.Fatal("the child exited 0 on a full disk")
	}
	// Tally says which directory and why. Badger may abort the process ("Assert failed",
	// its log.Fatal) on the next write after the failed one, or panic on another
	// partition's read (its memtable is nil once the next could not be opened: 1 CI run
	// in about ten, 11-29), either of which can come before Tally's own message; Badger's
	// error line, naming the file and the cause, is then the clear error, and it is
	// always logged before that abort.
	clear := "cannot write to the data directory " + ch.dir
	if !strings.Contains(stderr, clear) && !strings.Contains(stderr, "msg=\"badger: writeRequests: writeRequests err: cannot create new mem table") &&
		!strings.Contains(stderr, "While opening memtable: "+ch.dir) {
		t.Fatalf("no error in stderr names the data directory and the cause")
	}
	if !strings.Contains(stderr, "file too large") {
		t.Fatalf("no error in stderr says the file is too large")
	}
	t.Logf("Tally's own message logged: %v", strings.Contains(stderr, clear))

	// Restart without the limit: the producer re-sends what was not acknowledged.
	ch.start()
	c = diskClient(t, server)
	rig.Eventually(t, "restarted after the full disk", func() (bool, string) {
		if !ch.running() {
			// Badger leaves the memtable file it could not size empty, and an empty
			// memtable file stops it from opening (fixed in store/cold.Open by removing it).
			t.Fatalf("the restart after the full disk failed (exit %d): %s", ch.waitExit(time.Second), lastLine(ch.stderr.String()))
		}
		_, err := c.Health(context.Background())
		return err == nil, fmt.Sprint(err)
	})
	if pending != nil {
		publishUntil(t, c, pendingTx, pending, func() bool { return false })
	}
	for i := range 3 { // and goes on
		evs := make([]pipeline.Event, 300)
		for i := range evs {
			evs[i] = g.event()
		}
		publishUntil(t, c, "after."+strconv.Itoa(i), evs, func() bool { return false })
	}
	// What the child accepted past the limit is a backlog of as many chunks as it took
	// to fail (55–155 in the runs of 12-02, each with 20 messages dead-lettered),
	// applied now by a process that shares the machine with the rest of the suite under
	// -race: a minute and a half for it, where a partition that stopped would not catch
	// up at all.
	caught := time.Now()
	rig.WaitHealthy(t, c, 90*time.Second)
	t.Logf("caught up %v after the restart", time.Since(caught).Round(time.Millisecond))
	compare(t, c, g)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestDiskReadOnly makes the data directory of a Tally that ran and stopped read-only:
// the restart must fail fast, non-zero, saying so; once writable again, the state must
// be intact.
func TestDiskReadOnly(t *testing.T) {
	ch := &diskChild{t: t, dir: t.TempDir(), listen: rig.FreeAddr(t)}
	if os.Geteuid() == 0 { // root writes through any mode: run the child as nobody
		ch.cred = &syscall.Credential{Uid: 65534, Gid: 65534}
		accessible(t, ch.dir)
	}
	ch.start()
	t.Cleanup(func() {
		ch.stop()
		if t.Failed() {
			t.Logf("last child stderr:\n%s", ch.stderr.String())
		}
	})
	c := diskClient(t, ch.listen)
	g := &gen{r: rand.New(rand.NewPCG(51, 52)), users: 500, posts: 400}
	for chunk := range 6 {
		evs := make([]pipeline.Event, 800)
		for i := range evs {
			evs[i] = g.event()
		}
		publishUntil(t, c, "ro."+strconv.Itoa(chunk), evs, func() bool { return false })
	}
	rig.WaitCaughtUp(t, c)
	ch.stop()

	chmodTree(t, ch.dir, 0o500, 0o400)
	ch.start()
	began := time.Now()
	code := ch.waitExit(20 * time.Second)
	took := time.Since(began)
	stderr := ch.stderr.String()
	t.Logf("read-only restart exited %d after %v; stderr ends:\n%s", code, took, rig.Tail(stderr, 4))
	if code == 0 {
		t.Fatal("the child started on a read-only data directory")
	}
	if last := lastLine(stderr); !strings.Contains(last, ch.dir) || !strings.Contains(last, "permission denied") {
		t.Fatalf("the child's last words do not name the data directory and the cause: %q", last)
	}
	if took > 10*time.Second {
		t.Fatalf("the read-only restart took %v to fail", took)
	}

	chmodTree(t, ch.dir, 0o755, 0o644)
	ch.start()
	rig.WaitCaughtUp(t, c)
	compare(t, c, g)
}

// accessible lets uid nobody reach dir (and own it) and run this test binary, adding
// search permission for others to the temporary directories above them that lack it.
func accessible(t *testing.T, dir string) {
	t.Helper()
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Skipf("cannot hand the data directory to nobody: %v", err)
	}
	for _, start := range []string{filepath.Dir(dir), filepath.Dir(os.Args[0])} {
		for d := start; d != "/" && d != "."; d = filepath.Dir(d) {
			fi, err := os.Stat(d)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm()&0o005 != 0o005 {
				// Only temporary directories are opened up, never one of the machine's.
				if rel, err := filepath.Rel(os.TempDir(), d); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
					t.Skipf("uid nobody cannot reach %s, outside %s", d, os.TempDir())
				}
				if err := os.Chmod(d, fi.Mode().Perm()|0o005); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// chmodTree sets every directory under root (root too) to dirMode and every file to
// fileMode.
func chmodTree(t *testing.T, root string, dirMode, fileMode os.FileMode) {
	t.Helper()
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.IsDir() {
			return os.Chmod(p, dirMode)
		}
		return os.Chmod(p, fileMode)
	})
	if err != nil {
		t.Fatal(err)
	}
}
