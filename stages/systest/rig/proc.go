package rig

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TallydPartitions is the partition count StartTallyd gives tallyd (as benchTally's).
const TallydPartitions = 16

// This file runs tallyd as real OS processes for the cluster benchmarks: each has its own
// runtime, Badger and CPU account, as in production, so what one process applies and
// what it costs can be read from outside (its /metrics and /proc/<pid>/stat).

// clockTicks is the unit of utime and stime in /proc/<pid>/stat: USER_HZ, which is 100
// on every Linux architecture Go runs on (getconf CLK_TCK); the benchmarks assume it.
const clockTicks = 100

// Tallyd returns the path of cmd/tallyd built from this checkout, building it on the
// first call of the test binary only: every test and benchmark runs the same binary, and
// the build (a dozen seconds under load) is paid once. The binary lives in a directory of
// its own, which RemoveTallyd deletes (TestMain calls it after the run). A failed build
// fails every test that asks.
func Tallyd(tb testing.TB) string {
	tb.Helper()
	bin, err := buildTallyd()
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

// buildTallyd is package state on purpose: "once per test binary" is the point of it.
var buildTallyd = sync.OnceValues(func() (string, error) {
	// The module's root, from the test's directory (go test runs a test binary there).
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	dir, err := os.MkdirTemp("", "tally-systest-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "tallyd")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/tallyd")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/tallyd: %w\n%s", err, out)
	}
	return bin, nil
})

// RemoveTallyd deletes the binary Tallyd built, if it built one.
func RemoveTallyd() {
	if bin, err := buildTallyd(); err == nil {
		_ = os.RemoveAll(filepath.Dir(bin))
	}
}

// TallydProc is one tallyd process started by startTallyd.
type TallydProc struct {
	cmd     *exec.Cmd
	metrics string     // address of its /metrics
	logs    *LogBuffer // its stderr
	done    chan struct{}
	killed  atomic.Bool // by the test
}

// StartTallyd runs bin joined to the NATS servers at urls with the cluster benchmarks'
// settings: TallydPartitions partitions, --join, backups every 30 s, a 100 ms flush (as benchTally),
// its own data directory and metrics address; extra flags come last and win. The process
// is SIGKILLed at cleanup: its state is thrown away with its directory.
func StartTallyd(tb testing.TB, bin, urls string, extra ...string) *TallydProc {
	tb.Helper()
	p := &TallydProc{metrics: FreeAddr(tb), logs: new(LogBuffer), done: make(chan struct{})}
	args := append([]string{"--nats", urls, "--join", "--partitions", strconv.Itoa(TallydPartitions), "--backup-every", "30s",
		"--flush", "100ms", "--data", tb.TempDir(), "--metrics", p.metrics}, extra...)
	if os.Getenv("TALLY_BENCH_LOGS") != "" { // what the failover benchmark prints of the survivors
		args = append(args, "--log-level", "debug")
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		if !p.killed.Load() { // it died on its own: say why, now
			fmt.Fprintf(os.Stderr, "tallyd %d exited by itself (%v); stderr (last 40 lines):\n%s\n", p.cmd.Process.Pid, err, Tail(p.Logs(), 40))
		}
		close(p.done)
	}()
	tb.Cleanup(func() {
		p.Kill()
		if tb.Failed() {
			tb.Logf("tallyd %d stderr (last 40 lines):\n%s", p.cmd.Process.Pid, Tail(p.Logs(), 40))
		}
	})
	return p
}

// Pid is the process's id.
func (p *TallydProc) Pid() int { return p.cmd.Process.Pid }

// Logs is what the process wrote to its stderr so far.
func (p *TallydProc) Logs() string { return p.logs.String() }

// Restart starts the process again, as it was started (its data directory, its
// metrics address); its log goes on in logs.
func (p *TallydProc) Restart(tb testing.TB) {
	tb.Helper()
	p.cmd = exec.Command(p.cmd.Path, p.cmd.Args[1:]...)
	p.cmd.Stderr = p.logs
	p.done = make(chan struct{})
	p.killed.Store(false)
	if err := p.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	cmd, done := p.cmd, p.done
	go func() {
		err := cmd.Wait()
		if !p.killed.Load() {
			fmt.Fprintf(os.Stderr, "tallyd %d exited by itself (%v); stderr (last 40 lines):\n%s\n", cmd.Process.Pid, err, Tail(p.Logs(), 40))
		}
		close(done)
	}()
}

// Kill SIGKILLs the process and waits until it is gone.
func (p *TallydProc) Kill() {
	p.killed.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Scrape reads the process's /metrics: each metric's value summed over its labels.
func (p *TallydProc) Scrape(ctx context.Context) (map[string]float64, error) {
	return ScrapeMetrics(ctx, p.metrics)
}

// CPUProfile is the process's CPU profile over the next d (tallyd run with --pprof).
func (p *TallydProc) CPUProfile(ctx context.Context, d time.Duration) ([]byte, error) {
	body, err := get(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.metrics, int(d.Seconds())))
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return io.ReadAll(body)
}

// ScrapeMetrics reads the /metrics served at addr (host:port): each metric's value
// summed over its labels.
func ScrapeMetrics(ctx context.Context, addr string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, err := get(ctx, "http://"+addr+"/metrics")
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return ParseMetrics(body)
}

// get is the body of a GET of url, which answered 200.
func get(ctx context.Context, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return resp.Body, nil
}

// ParseMetrics sums the samples of each metric in the Prometheus text format.
func ParseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(name, '{'); i >= 0 { // labels may hold spaces
			name = line[:i]
			j := strings.LastIndexByte(line, '}')
			if j < 0 {
				return nil, fmt.Errorf("bad metrics line %q", line)
			}
			rest = line[j+1:]
		}
		fields := strings.Fields(rest) // value, then an optional timestamp
		if len(fields) == 0 {
			return nil, fmt.Errorf("bad metrics line %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("bad metrics line %q: %w", line, err)
		}
		out[name] += v
	}
	return out, sc.Err()
}

// MustScrape is Scrape, failing tb on an error.
func (p *TallydProc) MustScrape(tb testing.TB) map[string]float64 {
	tb.Helper()
	m, err := p.Scrape(context.Background())
	if err != nil {
		tb.Fatalf("tallyd %d: %v", p.cmd.Process.Pid, err)
	}
	return m
}

// CPU is the CPU time the process has used so far, user and system: utime and stime
// of /proc/<pid>/stat, in clockTicks.
func (p *TallydProc) CPU(tb testing.TB) time.Duration {
	tb.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/stat")
	if err != nil {
		tb.Fatalf("CPU time of tallyd: %v", err)
	}
	d, err := ParseStatCPU(data)
	if err != nil {
		tb.Fatalf("CPU time of tallyd: %v", err)
	}
	return d
}

// ParseStatCPU reads utime + stime from a /proc/<pid>/stat line. The command name (field
// 2) is in parentheses and may hold spaces, so fields are counted after its last ')'.
func ParseStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	f := strings.Fields(string(stat[i+1:])) // f[0] is field 3 (state): utime is 14, stime 15
	if len(f) < 13 {
		return 0, fmt.Errorf("short stat line %q", stat)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat field %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}
