package node_test

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

// This file runs tallyd as real OS processes for the cluster benchmarks: each has its own
// runtime, Badger and CPU account, as in production, so what one process applies and
// what it costs can be read from outside (its /metrics and /proc/<pid>/stat).

// clockTicks is the unit of utime and stime in /proc/<pid>/stat: USER_HZ, which is 100
// on every Linux architecture Go runs on (getconf CLK_TCK); the benchmarks assume it.
const clockTicks = 100

// tallydBuilder returns a function that builds cmd/tallyd from this checkout once, into
// the parent benchmark's temporary directory, and returns the binary's path to any of its
// sub-benchmarks. The parent's b is only used for TempDir, which is safe from the
// sub-benchmarks' goroutines; a failed build fails the sub-benchmark that asked.
func tallydBuilder(parent testing.TB) func(testing.TB) string {
	build := sync.OnceValues(func() (string, error) {
		root, err := filepath.Abs(filepath.Join("..", "..")) // stages/node is two levels down
		if err != nil {
			return "", err
		}
		bin := filepath.Join(parent.TempDir(), "tallyd")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/tallyd")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build ./cmd/tallyd: %w\n%s", err, out)
		}
		return bin, nil
	})
	return func(tb testing.TB) string {
		tb.Helper()
		bin, err := build()
		if err != nil {
			tb.Fatal(err)
		}
		return bin
	}
}

// tallydProc is one tallyd process started by startTallyd.
type tallydProc struct {
	cmd     *exec.Cmd
	metrics string     // address of its /metrics
	logs    *logBuffer // its stderr
	done    chan struct{}
	killed  atomic.Bool // by the test
}

// startTallyd runs bin joined to the NATS servers at urls with the cluster benchmarks'
// settings: 16 partitions, --join, backups every 30 s, a 100 ms flush (as benchTally),
// its own data directory and metrics address; extra flags come last and win. The process
// is SIGKILLed at cleanup: its state is thrown away with its directory.
func startTallyd(tb testing.TB, bin, urls string, extra ...string) *tallydProc {
	tb.Helper()
	p := &tallydProc{metrics: freeAddr(tb), logs: new(logBuffer), done: make(chan struct{})}
	args := append([]string{"--nats", urls, "--join", "--partitions", "16", "--backup-every", "30s",
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
			fmt.Fprintf(os.Stderr, "tallyd %d exited by itself (%v); stderr (last 40 lines):\n%s\n", p.cmd.Process.Pid, err, tail(p.logs.String(), 40))
		}
		close(p.done)
	}()
	tb.Cleanup(func() {
		p.kill()
		if tb.Failed() {
			tb.Logf("tallyd %d stderr (last 40 lines):\n%s", p.cmd.Process.Pid, tail(p.logs.String(), 40))
		}
	})
	return p
}

// restart starts the process again, as it was started (its data directory, its
// metrics address); its log goes on in logs.
func (p *tallydProc) restart(tb testing.TB) {
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
			fmt.Fprintf(os.Stderr, "tallyd %d exited by itself (%v); stderr (last 40 lines):\n%s\n", cmd.Process.Pid, err, tail(p.logs.String(), 40))
		}
		close(done)
	}()
}

// kill SIGKILLs the process and waits until it is gone.
func (p *tallydProc) kill() {
	p.killed.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// scrape reads the process's /metrics: each metric's value summed over its labels.
func (p *tallydProc) scrape(ctx context.Context) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metrics+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics sums the samples of each metric in the Prometheus text format.
func parseMetrics(r io.Reader) (map[string]float64, error) {
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

// mustScrape is scrape, failing tb on an error.
func (p *tallydProc) mustScrape(tb testing.TB) map[string]float64 {
	tb.Helper()
	m, err := p.scrape(context.Background())
	if err != nil {
		tb.Fatalf("tallyd %d: %v", p.cmd.Process.Pid, err)
	}
	return m
}

// cpu is the CPU time the process has used so far, user and system: utime and stime
// of /proc/<pid>/stat, in clockTicks.
func (p *tallydProc) cpu(tb testing.TB) time.Duration {
	tb.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/stat")
	if err != nil {
		tb.Fatalf("CPU time of tallyd: %v", err)
	}
	d, err := parseStatCPU(data)
	if err != nil {
		tb.Fatalf("CPU time of tallyd: %v", err)
	}
	return d
}

// parseStatCPU reads utime + stime from a /proc/<pid>/stat line. The command name (field
// 2) is in parentheses and may hold spaces, so fields are counted after its last ')'.
func parseStatCPU(stat []byte) (time.Duration, error) {
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

// TestParseProc checks the two readers of another process's figures on fixed input.
func TestParseProc(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(`# HELP tally_events_applied_total Events applied by type.
# TYPE tally_events_applied_total counter
tally_events_applied_total{type="like"} 700
tally_events_applied_total{type="view"} 3e+02
tally_owned_partitions 5
tally_odd{a="x y}"} 2 1700000000000
`))
	if err != nil {
		t.Fatal(err)
	}
	if m["tally_events_applied_total"] != 1000 || m["tally_owned_partitions"] != 5 || m["tally_odd"] != 2 {
		t.Fatalf("parsed %v", m)
	}
	d, err := parseStatCPU([]byte("4242 (tally d) S 1 2 3 4 5 6 7 8 9 10 150 250 0 0 20 0 9 0 100 0 0\n"))
	if err != nil || d != 4*time.Second {
		t.Fatalf("cpu %v, %v; want 4s", d, err)
	}
	d, err = parseStatCPU(nil)
	if err == nil {
		t.Fatalf("cpu of nothing: %v, want an error", d)
	}
}
