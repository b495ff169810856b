package node

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// A burst (a backlog drained, a restore) leaves the heap holding what it no longer
// uses: Badger's table builds, the largest of which it pools for 2 s and then drops,
// and the stages' batches. Go frees that garbage only at its next collection, which an
// idle process does not start for two minutes, and gives pages back to the system
// slowly: 20 s after a 2 M-event backlog drained, tallyd held 1 GB, 82 % of it Badger's
// dropped table builds (docs/performance.md, Sizing). TrimWhenIdle gives such memory back once the
// process goes quiet.

const (
	// idleAllocs is what a process may allocate between two samples and still be idle:
	// a few queries, lease renewals and metrics scrapes allocate far less.
	idleAllocs = 32 << 20
	// burstAllocs is what a process must have allocated since its last trim for a quiet
	// spell to be worth a collection: what it allocated is garbage by now, or was
	// collected already and its pages are free.
	burstAllocs = 256 << 20
	// trimSlack is the least heap, in use or free, worth a trim.
	trimSlack = 64 << 20
)

// heapSample is what TrimWhenIdle reads of the runtime at each tick.
type heapSample struct {
	allocs  uint64 // bytes allocated since the start
	objects uint64 // heap held by objects, live or not yet collected
	free    uint64 // heap free and not yet given back to the system
}

var heapMetrics = []string{"/gc/heap/allocs:bytes", "/memory/classes/heap/objects:bytes", "/memory/classes/heap/free:bytes"}

func readHeap() heapSample {
	s := make([]metrics.Sample, len(heapMetrics))
	for i, name := range heapMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 { // a metric this Go does not have
			return 0
		}
		return s[i].Value.Uint64()
	}
	return heapSample{allocs: v(0), objects: v(1), free: v(2)}
}

// worthTrimming tells whether a process sampled at prev and then at cur has been idle
// in between, after a burst since its last trim (sampled at trimmed), with a heap worth
// trimming. Which objects are garbage only a collection finds out (the heap live at
// the last one may have been the burst itself), so a burst, not an estimate of the
// garbage, is what calls for one. Under load it never is: the collector runs anyway,
// and the memory limit bounds what it keeps.
func worthTrimming(trimmed, prev, cur heapSample) bool {
	return cur.allocs-prev.allocs < idleAllocs && cur.allocs-trimmed.allocs >= burstAllocs &&
		cur.objects+cur.free >= trimSlack
}

// TrimWhenIdle samples the heap every interval until ctx ends, and when the process has
// been idle since the last sample with memory to give back, collects and returns it to
// the system (debug.FreeOSMemory). It is the process's, like the memory limit: tallyd
// runs it, not the node (a test process runs several).
func TrimWhenIdle(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	prev := readHeap()
	trimmed := prev
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur := readHeap()
		if worthTrimming(trimmed, prev, cur) {
			trim()
			cur = readHeap() // what the trim allocated is not the next interval's
			trimmed = cur
		}
		prev = cur
	}
}

// trim collects twice and returns the free pages to the system. The first collection
// moves what sync.Pools hold to their victim caches (the embedded NATS server pools its
// file store's 8 MiB block buffers); the second frees them.
func trim() {
	runtime.GC()
	debug.FreeOSMemory()
}
