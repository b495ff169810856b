package node

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

// What no setting bounds, as measured in tallyd applying 2 M events (heap profiles from
// --pprof, see docs/performance.md, Sizing): the parts a budget sets aside before it sizes anything.
// Badger's are its peaks while it drains a backlog, when it flushes and compacts
// without pause; it keeps the buffers of its table builds for 2 s after the last.
const (
	// memTable is Badger's memtable size. It is not shared out: it also bounds one
	// transaction (Badger takes 15 % of it), which must hold a hop batch of up to half
	// the NATS payload limit (4 MiB).
	memTable = 32 << 20
	// memTableHeap is the heap one memtable takes: its arena holds the table, one
	// transaction and the transaction's skiplist nodes (41.6 MB measured).
	memTableHeap = memTable * 13 / 10
	// flushHeap is what building a table from a full memtable holds: the blocks, in
	// buffers that double as they fill and as a large value (a journal entry, an outbox
	// batch) outgrows its block. compactorHeap is what one compaction holds while it
	// builds its tables, up to five at once. Measured draining a backlog of 2 M events
	// under a 1001 MiB budget (docs/performance.md, the row "table builds unpooled"): a
	// flush at most 127 MB, two compactions 133 MB, all builds at once 158 MB. Each build
	// has buffers of its own (store/cold/badger): pooled, as Badger does, builds held up
	// to 564 MB.
	flushHeap     = 4 * memTable
	compactorHeap = 72 << 20
	// snappyFlushHeap and snappyCompactorHeap are the same with --cold-compression
	// snappy, where each block also has its compressed copy, made by goroutines that
	// allocate it from the same build's buffers: draining the backlog at a 1315 MiB
	// budget, unpooled, a flush held up to 245 MB and two compactions 266 MB (one run;
	// pooled, all builds up to 927 MB).
	snappyFlushHeap     = 9 * memTable
	snappyCompactorHeap = 176 << 20
	// natsHeap is the embedded server's: its file store buffers a whole block (8 MiB) of
	// every stream being written or read, and keeps the message ids of the duplicate
	// window: 64–100 MB measured under tally bench at first, then 120 MB of block
	// buffers alone at its peak, and 136 MB with 16 partitions draining a backlog.
	natsHeap = 128 << 20
	// runtimeHeap is the rest: goroutine stacks, the NATS client's buffers, the stages'
	// messages in flight, Go's own structures.
	runtimeHeap = 48 << 20
	// coldCacheEntry is the RAM of one id in the cold cache: 69 B measured for four
	// fields (coldcache.BenchmarkCache), 110 before its generations held their counts in one
	// array; 100 leaves room for the families of more fields.
	coldCacheEntry = 100
	// minHot is the least the counter tables may be given.
	minHot = 16 << 20
	// defaultMachineMem is what the machine is taken to have where it cannot be read (not
	// Linux).
	defaultMachineMem = 8 << 30
)

// MemSplit is how a memory budget (--max-mem) is shared out.
type MemSplit struct {
	// Budget is the whole: Config.MaxMem, or three quarters of what the machine allows.
	Budget int64
	// Hot bounds the counter tables (their least recently used ids move to the cold tier
	// beyond it): what the other parts leave, or Config.HotMaxMem.
	Hot int64
	// ColdCache is the cold cache's RAM: Config.ColdCache ids, ~100 B each, one budget
	// the counter partitions that hold cold ids share (coldcache.Budget). State is
	// what the event partitions keep of their state (Config.StateMem: owned and standby
	// partitions are never more than all of them).
	ColdCache, State int64
	// Memtables is how many Badger memtables may be in RAM at once (the one written and
	// those waiting to be flushed), ~42 MB each; Compactors how many compactions run
	// at once.
	Memtables, Compactors int
	// BlockCache and IndexCache bound Badger's decompressed blocks (only with
	// --cold-compression snappy: uncompressed tables are read in place) and its tables'
	// indexes and Bloom filters (all of which it would otherwise keep, ~5 % of the data
	// on disk).
	BlockCache, IndexCache int64
	// Fixed is what no setting bounds: Badger's flush and compactions building tables,
	// the embedded NATS server's buffers, Go's runtime and the stages' messages.
	Fixed int64
	// Headroom is left for garbage between two garbage collections: the less, the more
	// often the collector runs.
	Headroom int64
	// GoLimit is the Go runtime's soft memory limit: the budget, or the sum of the
	// parts when HotMaxMem makes it larger.
	GoLimit int64
	// Machine is the memory the machine allows the process, when the budget was sized
	// from it (0 when given): a budget above three quarters of it is the least a
	// process needs, more than the machine should give.
	Machine int64
}

// Short reports whether the budget is more than three quarters of what the machine
// allows: the least a process needs, on a machine too small for it.
func (m MemSplit) Short() bool { return m.Machine > 0 && m.Budget > m.Machine/4*3 }

// memtables is the RAM of Badger's memtables.
func (m MemSplit) memtables() int64 { return int64(m.Memtables) * memTableHeap }

// String lists the parts, for the log.
func (m MemSplit) String() string {
	return fmt.Sprintf("budget %s: hot tables %s, cold cache %s, event state %s, Badger memtables %d×%s, block cache %s, index cache %s, fixed %s, GC headroom %s; Go limit %s",
		Bytes(m.Budget), Bytes(m.Hot), Bytes(m.ColdCache), Bytes(m.State), m.Memtables, Bytes(memTableHeap), Bytes(m.BlockCache), Bytes(m.IndexCache),
		Bytes(m.Fixed), Bytes(m.Headroom), Bytes(m.GoLimit))
}

// SplitMem shares budget bytes out between the parts of a process of c (pure: it reads
// only c's NATSURL, ColdCache, StateMem, HotMaxMem and ColdCompression). The Badger parts grow with the budget up
// to Badger's defaults, the index cache keeps growing (it bounds what grows with the
// data on disk), and the counter tables get the rest. A budget too small for the parts
// no setting bounds is an error naming the least that would do.
func (c Config) SplitMem(budget int64) (MemSplit, error) {
	m := c.parts(budget)
	others := m.others()
	if budget < others+minHot {
		return m, fmt.Errorf("%w: %s is below the %s a process needs (Badger's memtables and table builds, NATS buffers, the cold cache of %d ids, %s of event state, Go's runtime; see docs/performance.md, Sizing)",
			ErrMemTooSmall, Bytes(budget), Bytes(c.leastMem()), c.ColdCache, Bytes(c.StateMem))
	}
	m.Hot = budget - others
	if c.HotMaxMem > 0 {
		m.Hot = c.HotMaxMem
	}
	m.GoLimit = max(budget, others+m.Hot)
	return m, nil
}

// leastMem is the least budget SplitMem accepts, in whole MiB. The parts grow with the
// budget: it is where they stop outgrowing it (a few rounds, each adding at most 3/16 of
// the last).
func (c Config) leastMem() int64 {
	least := c.parts(0).others() + minHot
	for least < c.parts(least).others()+minHot {
		least = c.parts(least).others() + minHot
	}
	return (least + 1<<20 - 1) &^ (1<<20 - 1)
}

// parts sizes every part of a budget but the counter tables.
func (c Config) parts(budget int64) MemSplit {
	m := MemSplit{Budget: budget, ColdCache: int64(c.ColdCache) * coldCacheEntry, State: c.StateMem}
	m.Memtables = int(min(max(budget/(512<<20), 2), 5))
	m.Compactors = 2
	if budget >= 4<<30 { // a machine with the cores to compact faster
		m.Compactors = 4
	}
	if c.snappy() { // uncompressed tables are read in place
		m.BlockCache = min(max(budget/32, 16<<20), 256<<20)
	}
	m.IndexCache = max(budget/32, 16<<20)
	flush, compactor := int64(flushHeap), int64(compactorHeap)
	if c.snappy() {
		flush, compactor = snappyFlushHeap, snappyCompactorHeap
	}
	m.Fixed = flush + int64(m.Compactors)*compactor + runtimeHeap
	if c.NATSURL == "" {
		m.Fixed += natsHeap
	}
	m.Headroom = max(budget/8, 64<<20)
	return m
}

// others is what the parts but the counter tables add up to.
func (m MemSplit) others() int64 {
	return m.ColdCache + m.State + m.memtables() + m.BlockCache + m.IndexCache + m.Fixed + m.Headroom
}

// Mem is the split of c's budget: MaxMem, or, when 0, three quarters of what the
// machine allows this process (its cgroup's memory limit, a container's, or the RAM) —
// or the least a process needs where that is less (Machine says so). A MaxMem too small
// is an error.
func (c Config) Mem(root fs.FS) (MemSplit, error) {
	if c.MaxMem > 0 {
		return c.SplitMem(c.MaxMem)
	}
	mem := machineMem(root)
	m, err := c.SplitMem(mem / 4 * 3)
	if errors.Is(err, ErrMemTooSmall) {
		m, err = c.SplitMem(c.leastMem())
	}
	m.Machine = mem
	return m, err
}

// machineMem is the memory this process may use, read from root (the file system's
// root, os.DirFS("/")): the RAM (/proc/meminfo), or less when its cgroup (v2 or v1)
// limits it; defaultMachineMem where neither can be read.
func machineMem(root fs.FS) int64 {
	mem := int64(0)
	if b, err := fs.ReadFile(root, "proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					mem = kb << 10
				}
			}
		}
	}
	// The memory limit of this process's cgroup (v2, or v1's memory controller), then
	// of the roots a container's namespace shows it at.
	var files []string
	if b, err := fs.ReadFile(root, "proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.SplitN(line, ":", 3)
			switch {
			case len(f) != 3 || f[2] == "/":
			case f[0] == "0" && f[1] == "":
				files = append(files, "sys/fs/cgroup"+f[2]+"/memory.max")
			case slices.Contains(strings.Split(f[1], ","), "memory"):
				files = append(files, "sys/fs/cgroup/memory"+f[2]+"/memory.limit_in_bytes")
			}
		}
	}
	files = append(files, "sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes")
	for _, f := range files {
		b, err := fs.ReadFile(root, f)
		if err != nil {
			continue
		}
		// "max" (v2), or a number near 2^63 (v1), is no limit.
		if lim, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && lim > 0 && (mem == 0 || lim < mem) {
			mem = lim
		}
		break
	}
	if mem == 0 {
		return defaultMachineMem
	}
	return mem
}

// Bytes prints a size in binary units, as --max-mem reads it.
type Bytes int64

func (b Bytes) String() string {
	for _, u := range []struct {
		unit string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if int64(b) >= u.size {
			return fmt.Sprintf("%.4g%s", float64(b)/float64(u.size), u.unit)
		}
	}
	return fmt.Sprintf("%dB", int64(b))
}
