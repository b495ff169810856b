package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"testing/fstest"
)

// SplitMem shares a budget out: Badger's parts grow with it up to Badger's defaults, the
// index cache keeps growing, the counter tables get the rest, and the parts always add
// up to the Go limit. Tables written uncompressed (the default) need no block cache and
// less than half the heap to build.
func TestSplitMem(t *testing.T) {
	const MiB, GiB = 1 << 20, 1 << 30
	f := func(t *testing.T, c Config, budget int64, want MemSplit) {
		t.Helper()
		got, err := c.SplitMem(budget)
		if err != nil {
			t.Fatalf("SplitMem(%s): %v", Bytes(budget), err)
		}
		if got != want {
			t.Errorf("SplitMem(%s) =\n %+v\nwant\n %+v", Bytes(budget), got, want)
		}
		if sum := got.Hot + got.ColdCache + got.State + got.memtables() + got.BlockCache + got.IndexCache + got.Fixed + got.Headroom; sum > got.GoLimit || got.GoLimit < budget {
			t.Errorf("SplitMem(%s): the parts add up to %s, the Go limit is %s", Bytes(budget), Bytes(sum), Bytes(got.GoLimit))
		}
	}
	c := DefaultConfig() // embedded NATS, a cold cache of 262 144 ids, 128 MiB of event state
	cold, state := int64(c.ColdCache)*coldCacheEntry, c.StateMem
	fixed := int64(flushHeap + 2*compactorHeap + runtimeHeap + natsHeap) // 448 MiB
	t.Run("1.25GiB", func(t *testing.T) {
		f(t, c, 1280*MiB, MemSplit{Budget: 1280 * MiB, Hot: 1280*MiB - cold - state - 2*memTableHeap - 40*MiB - fixed - 160*MiB, ColdCache: cold, State: state,
			Memtables: 2, Compactors: 2, IndexCache: 40 * MiB, Fixed: fixed, Headroom: 160 * MiB, GoLimit: 1280 * MiB})
	})
	t.Run("2GiB", func(t *testing.T) {
		f(t, c, 2*GiB, MemSplit{Budget: 2 * GiB, Hot: 2*GiB - cold - state - 4*memTableHeap - 64*MiB - fixed - 256*MiB, ColdCache: cold, State: state,
			Memtables: 4, Compactors: 2, IndexCache: 64 * MiB, Fixed: fixed, Headroom: 256 * MiB, GoLimit: 2 * GiB})
	})
	t.Run("4GiB", func(t *testing.T) {
		fixed := fixed + 2*compactorHeap
		f(t, c, 4*GiB, MemSplit{Budget: 4 * GiB, Hot: 4*GiB - cold - state - 5*memTableHeap - 128*MiB - fixed - 512*MiB, ColdCache: cold, State: state,
			Memtables: 5, Compactors: 4, IndexCache: 128 * MiB, Fixed: fixed, Headroom: 512 * MiB, GoLimit: 4 * GiB})
	})
	t.Run("64GiB: Badger's defaults but the index cache", func(t *testing.T) {
		fixed := fixed + 2*compactorHeap
		f(t, c, 64*GiB, MemSplit{Budget: 64 * GiB, Hot: 64*GiB - cold - state - 5*memTableHeap - 2*GiB - fixed - 8*GiB, ColdCache: cold, State: state,
			Memtables: 5, Compactors: 4, IndexCache: 2 * GiB, Fixed: fixed, Headroom: 8 * GiB, GoLimit: 64 * GiB})
	})
	t.Run("external NATS, no cold cache, no event state", func(t *testing.T) {
		c := c
		c.NATSURL, c.ColdCache, c.StateMem = "nats://a:4222", 0, 0
		fixed := fixed - natsHeap
		f(t, c, GiB, MemSplit{Budget: GiB, Hot: GiB - 2*memTableHeap - 32*MiB - fixed - 128*MiB,
			Memtables: 2, Compactors: 2, IndexCache: 32 * MiB, Fixed: fixed, Headroom: 128 * MiB, GoLimit: GiB})
	})
	t.Run("hot-max-mem below its share", func(t *testing.T) {
		c := c
		c.HotMaxMem = 100 * MiB
		f(t, c, 2*GiB, MemSplit{Budget: 2 * GiB, Hot: 100 * MiB, ColdCache: cold, State: state,
			Memtables: 4, Compactors: 2, IndexCache: 64 * MiB, Fixed: fixed, Headroom: 256 * MiB, GoLimit: 2 * GiB})
	})
	t.Run("hot-max-mem above its share raises the Go limit", func(t *testing.T) {
		c := c
		c.HotMaxMem = 2 * GiB
		others := cold + state + 4*memTableHeap + 64*MiB + fixed + 256*MiB
		f(t, c, 2*GiB, MemSplit{Budget: 2 * GiB, Hot: 2 * GiB, ColdCache: cold, State: state,
			Memtables: 4, Compactors: 2, IndexCache: 64 * MiB, Fixed: fixed, Headroom: 256 * MiB, GoLimit: others + 2*GiB})
	})
	t.Run("snappy: a block cache, and the compressed copies of the blocks being built", func(t *testing.T) {
		c := c
		c.ColdCompression = "snappy"
		fixed := int64(snappyFlushHeap + 2*snappyCompactorHeap + runtimeHeap + natsHeap) // 816 MiB
		f(t, c, 2*GiB, MemSplit{Budget: 2 * GiB, Hot: 2*GiB - cold - state - 4*memTableHeap - 64*MiB - 64*MiB - fixed - 256*MiB, ColdCache: cold, State: state,
			Memtables: 4, Compactors: 2, BlockCache: 64 * MiB, IndexCache: 64 * MiB, Fixed: fixed, Headroom: 256 * MiB, GoLimit: 2 * GiB})
	})
}

// A budget too small for what no setting bounds is refused, naming the least that does.
func TestSplitMemTooSmall(t *testing.T) {
	c := DefaultConfig()
	// The least budget that works: the parts grow with the budget, slower than it.
	least := int64(sort.Search(2<<30, func(b int) bool { _, err := c.SplitMem(int64(b)); return err == nil }))
	named := (least + 1<<20 - 1) &^ (1<<20 - 1) // the error says it in whole MiB
	for _, b := range []int64{least, named, 2 << 30} {
		if m, err := c.SplitMem(b); err != nil || m.Hot < minHot {
			t.Errorf("SplitMem(%s): hot %s, %v", Bytes(b), Bytes(m.Hot), err)
		}
	}
	for _, b := range []int64{0, 1, 512 << 20, least - 1} {
		if _, err := c.SplitMem(b); !errors.Is(err, ErrMemTooSmall) || !strings.Contains(err.Error(), "below the "+Bytes(named).String()+" ") {
			t.Errorf("SplitMem(%s): %v, want ErrMemTooSmall naming %s", Bytes(b), err, Bytes(named))
		}
	}
	c.HotMaxMem = 1 << 30 // an override does not shrink the other parts
	if _, err := c.SplitMem(512 << 20); !errors.Is(err, ErrMemTooSmall) {
		t.Errorf("512MiB with --hot-max-mem: %v", err)
	}
}

// The machine's memory is its RAM, or its cgroup's limit when lower; unreadable, a
// default; a budget of 0 is three quarters of it.
func TestMachineMem(t *testing.T) {
	const GiB = 1 << 30
	meminfo := &fstest.MapFile{Data: []byte("MemTotal:       24684096 kB\nMemFree:        22465000 kB\n")}
	ram := int64(24684096) << 10
	for _, c := range []struct {
		name string
		fs   fstest.MapFS
		want int64
	}{
		{"RAM", fstest.MapFS{"proc/meminfo": meminfo}, ram},
		{"cgroup v2 of the process", fstest.MapFS{"proc/meminfo": meminfo, "proc/self/cgroup": {Data: []byte("0::/kubepods/pod1/c1\n")},
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": {Data: []byte("2147483648\n")}}, 2 * GiB},
		{"cgroup v2 at the namespace's root", fstest.MapFS{"proc/meminfo": meminfo, "proc/self/cgroup": {Data: []byte("0::/\n")},
			"sys/fs/cgroup/memory.max": {Data: []byte("4294967296\n")}}, 4 * GiB},
		{"cgroup v2 without a limit", fstest.MapFS{"proc/meminfo": meminfo, "proc/self/cgroup": {Data: []byte("0::/user.slice\n")},
			"sys/fs/cgroup/user.slice/memory.max": {Data: []byte("max\n")}}, ram},
		{"cgroup v1", fstest.MapFS{"proc/meminfo": meminfo, "proc/self/cgroup": {Data: []byte("5:devices:/\n4:memory:/process_api/abc\n0::/\n")},
			"sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes": {Data: []byte("3221225472\n")},
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                 {Data: []byte("9223372036854771712\n")}}, 3 * GiB},
		{"cgroup v1 without a limit", fstest.MapFS{"proc/meminfo": meminfo, "proc/self/cgroup": {Data: []byte("4:cpu,memory:/a\n")},
			"sys/fs/cgroup/memory/a/memory.limit_in_bytes": {Data: []byte("9223372036854771712\n")}}, ram},
		{"a limit above the RAM", fstest.MapFS{"proc/meminfo": meminfo, "sys/fs/cgroup/memory.max": {Data: []byte("107374182400\n")}}, ram},
		{"nothing to read", fstest.MapFS{}, defaultMachineMem},
	} {
		if got := machineMem(c.fs); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, Bytes(got), Bytes(c.want))
		}
		m, err := DefaultConfig().Mem(c.fs)
		if want := c.want / 4 * 3; err != nil || m.Budget != want || m.Machine != c.want || m.Short() {
			t.Errorf("%s: budget %s (%v), want %s", c.name, Bytes(m.Budget), err, Bytes(want))
		}
	}
	c := DefaultConfig()
	// A machine too small for a process: the least it needs, and Short says so.
	small := fstest.MapFS{"proc/meminfo": meminfo, "sys/fs/cgroup/memory.max": {Data: []byte("1073741824\n")}}
	if m, err := c.Mem(small); err != nil || m.Budget != c.leastMem() || m.Machine != GiB || !m.Short() {
		t.Errorf("a container of 1GiB: budget %s, machine %s, short %v, %v; want %s", Bytes(m.Budget), Bytes(m.Machine), m.Short(), err, Bytes(c.leastMem()))
	}
	c.MaxMem = 3 * GiB
	if m, err := c.Mem(small); err != nil || m.Budget != 3*GiB || m.Machine != 0 {
		t.Errorf("--max-mem 3GiB: %s %v", Bytes(m.Budget), err)
	}
}

// A node sizes Badger and bounds its counter tables from its budget, and says so.
func TestStartSizesFromBudget(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.Partitions, cfg.MaxMem = t.TempDir(), "127.0.0.1:-1", 2, 2<<30
	var logs bytes.Buffer
	n, err := Start(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	want, _ := cfg.SplitMem(2 << 30)
	o := n.db.Options()
	if o.MemTableSize != memTable || o.NumMemtables != want.Memtables || o.NumCompactors != want.Compactors ||
		o.BlockCacheSize != want.BlockCache || o.IndexCacheSize != want.IndexCache {
		t.Errorf("Badger: memtables %d × %d, %d compactors, block cache %d, index cache %d; want %+v",
			o.NumMemtables, o.MemTableSize, o.NumCompactors, o.BlockCacheSize, o.IndexCacheSize, want)
	}
	if line := fmt.Sprintf("max-mem=2GiB hot-max-mem=%s", Bytes(want.Hot)); !strings.Contains(logs.String(), line) {
		t.Errorf("the start line does not say %q:\n%s", line, logs.String())
	}
}
