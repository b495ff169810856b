package node

import (
	"context"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestWorthTrimming(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		name       string
		trimmed    heapSample
		prev, cur  heapSample
		want       bool
		whyNotWant string
	}{
		{"quiet after a burst", heapSample{allocs: 100 * mb}, heapSample{allocs: 1000 * mb}, heapSample{allocs: 1010 * mb, objects: 900 * mb}, true, ""},
		{"quiet after a burst, collected", heapSample{}, heapSample{allocs: 300 * mb}, heapSample{allocs: 301 * mb, objects: 10 * mb, free: 200 * mb}, true, ""},
		{"busy", heapSample{}, heapSample{allocs: 1000 * mb}, heapSample{allocs: 1100 * mb, objects: 900 * mb}, false, "it allocated 100 MB since the last sample"},
		{"quiet, no burst since the last trim", heapSample{allocs: 900 * mb}, heapSample{allocs: 1000 * mb}, heapSample{allocs: 1001 * mb, objects: 900 * mb}, false, "101 MB since the trim"},
		{"quiet after a burst, small heap", heapSample{}, heapSample{allocs: 1000 * mb}, heapSample{allocs: 1001 * mb, objects: 30 * mb, free: 20 * mb}, false, "50 MB is under the slack"},
	} {
		if got := worthTrimming(c.trimmed, c.prev, c.cur); got != c.want {
			t.Errorf("%s: worthTrimming = %v, want %v (%s)", c.name, got, c.want, c.whyNotWant)
		}
	}
}

// TestTrimWhenIdleGivesBurstsBack: garbage left by a burst is collected and its pages
// given back once the process goes quiet, without waiting for Go's two-minute
// collection.
func TestTrimWhenIdleGivesBurstsBack(t *testing.T) {
	released := func() uint64 {
		s := []metrics.Sample{{Name: "/memory/classes/heap/released:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	before := released()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go TrimWhenIdle(ctx, 20*time.Millisecond)
	burst := func() {
		b := make([][]byte, 300)
		for i := range b {
			b[i] = make([]byte, 1<<20)
			b[i][0] = 1
		}
		runtime.KeepAlive(b) // all of it live at once, as a drain's table builds are
	}
	// A burst made before the trimmer's first sample (its goroutine scheduled late on a
	// loaded machine) is not one since that sample: a burst goes again until one counts.
	for try := 1; ; try++ {
		burst()
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if released()-min(before, released()) >= 128<<20 {
				return
			}
		}
		if try == 3 {
			t.Fatalf("three bursts of 300 MB were not given back: %d MB released", (released()-min(before, released()))>>20)
		}
	}
}
