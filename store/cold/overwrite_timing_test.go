package cold_test

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/tally-dev/tally/store/cold"
)

// BenchmarkOverwrites is what Badger's compactions cost for the checkpoints of a large
// table: 8 M counter keys stored (not timed), then b.N overwrites of them, Zipf-skewed
// (s 1.1) as views are, in transactions of 5 000. It reports the CPU of the whole process
// per write, counted until the process is idle after the last (Badger has compacted
// what it compacts), and the tables left in level 0, which Badger compacts only once it
// holds NumLevelZeroTables: a benchmark that stops when the process is idle leaves up to
// that many tables' compactions uncounted, so a higher threshold looks cheaper over a
// short run than it is (docs/performance.md, "Badger's L0 threshold"). It then compacts
// every level into one, so that both end alike, and reports the CPU with that too.
// Run: go test ./store/cold -run XXX -bench Overwrites -benchtime 24000000x
func BenchmarkOverwrites(b *testing.B) {
	const keys = 8_000_000
	for _, l0 := range []int{5, 10} {
		b.Run(fmt.Sprintf("level0=%d", l0), func(b *testing.B) {
			db, err := cold.Open(cold.WithLevelZero(cold.Options{Dir: b.TempDir(), NumMemtables: 2, IndexCacheSize: 32 << 20, NumCompactors: 2}, l0))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			// Badger keeps the key and value it is given until the commit: each is a
			// copy of its own, in room kept from one transaction to the next.
			held := make([]byte, 0, 5000*32)
			put := func(n int, id func(i int) uint64, v uint64) {
				for i := 0; i < n; i += 5000 {
					txn := db.NewTxn(true)
					held = held[:0]
					for j := i; j < min(i+5000, n); j++ {
						at := len(held)
						held = binary.BigEndian.AppendUint64(append(held, "c/post/\x00"...), id(j))
						held = binary.LittleEndian.AppendUint64(append(held, make([]byte, 8)...), v+uint64(j))
						if err := txn.Set(held[at:at+16:at+16], held[at+16:at+32:at+32]); err != nil {
							b.Fatal(err)
						}
					}
					if err := txn.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			}
			spread := func(i uint64) uint64 { return i * 0x9E3779B97F4A7C15 } // ids over the key space
			put(keys, func(i int) uint64 { return spread(uint64(i)) }, 0)
			idle()
			zipf := rand.NewZipf(rand.New(rand.NewSource(1)), 1.1, 1, keys-1)
			from := cpuTime()
			b.ResetTimer()
			put(b.N, func(int) uint64 { return spread(zipf.Uint64()) }, 1)
			b.StopTimer()
			idle()
			b.ReportMetric(float64((cpuTime()-from).Nanoseconds())/float64(b.N)/1e3, "cpu-µs/write")
			for _, l := range cold.Levels(db) {
				if l.Level == 0 {
					b.ReportMetric(float64(l.NumTables), "level0-tables-left")
					b.ReportMetric(float64(l.Size)/(1<<20), "level0-MiB-left")
				}
			}
			// What is left counted too: every level compacted into one, in either case.
			if err := cold.Flatten(db); err != nil {
				b.Fatal(err)
			}
			idle()
			b.ReportMetric(float64((cpuTime()-from).Nanoseconds())/float64(b.N)/1e3, "cpu-µs/write-flattened")
		})
	}
}

// idle waits until the process uses less than 5 % of a core over a quarter of a second,
// twice in a row: Badger's flushes and compactions are over.
func idle() {
	const every = 250 * time.Millisecond
	for quiet := 0; quiet < 2; {
		from := cpuTime()
		time.Sleep(every)
		if cpuTime()-from < every/20 {
			quiet++
		} else {
			quiet = 0
		}
	}
}
