package window

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// onCPU runs fn on one OS thread and reports the CPU time that thread spent in it per
// op (cpu-ns/op), from Linux's scheduler statistics: on a machine shared with other
// benchmarks the wall-clock ns/op varies twofold, the time on CPU much less. The GC's
// background work on other threads is not in it.
func onCPU(b *testing.B, fn func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start, ok := threadCPU()
	b.ResetTimer()
	fn()
	b.StopTimer()
	if end, ok2 := threadCPU(); ok && ok2 {
		b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
	}
}

// threadCPU is the time the calling thread has run, in ns: the first field of
// /proc/thread-self/schedstat.
func threadCPU() (int64, bool) {
	s, err := os.ReadFile("/proc/thread-self/schedstat")
	if err != nil {
		return 0, false
	}
	f, _, _ := bytes.Cut(s, []byte(" "))
	n, err := strconv.ParseInt(string(f), 10, 64)
	return n, err == nil
}
