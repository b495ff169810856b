package cold_test

import (
	"encoding/binary"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/store/cold"
)

// BenchmarkFloor is what Badger alone costs for the least a like must write: a new
// liker's like record looked for (a miss, as for a user never seen) and set, or only
// set, in transactions of 10 000 as an event stage's, with tallyd's options. It reports
// the CPU of the whole process (Badger's writer, memtable flushes and compactions
// included, as far as they run within the loop: a floor, not a ceiling) per like, and
// how many likes a second that is on every core of this machine with nothing else
// running: the most any Tally could apply here with one Badger entry a like.
// Run: go test ./store/cold -run XXX -bench Floor -benchtime 2000000x
func BenchmarkFloor(b *testing.B) {
	for _, c := range []struct {
		name string
		get  bool
	}{{"set", false}, {"get-miss+set", true}} {
		b.Run(c.name, func(b *testing.B) {
			db, err := cold.Open(cold.Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			// Badger keeps the key and value it is given until the commit: each is a
			// copy of its own, in room kept from one transaction to the next.
			held := make([]byte, 0, 10_000*52)
			from := cpuTime()
			start := time.Now()
			txn := db.NewTxn(true)
			for i := range b.N {
				n := len(held)
				held = binary.BigEndian.AppendUint64(append(held, 'L', 0, 3, 'r'), uint64(i)*0x9E3779B97F4A7C15) // users spread over the key space
				key := held[n:len(held):len(held)]
				held = binary.BigEndian.AppendUint64(held, uint64(i))
				held = append(held, make([]byte, 32)...) // a like record of one like: the post, its owner, its place
				val := held[n+12 : len(held) : len(held)]
				if c.get {
					found, err := txn.Get(key, func([]byte) error { return nil })
					if err != nil || found {
						b.Fatalf("user %d: found %v, %v; want a miss", i, found, err)
					}
				}
				if err := txn.Set(key, val); err != nil {
					b.Fatal(err)
				}
				if (i+1)%10_000 == 0 || i == b.N-1 {
					if err := txn.Commit(); err != nil {
						b.Fatal(err)
					}
					txn, held = db.NewTxn(true), held[:0]
				}
			}
			txn.Discard()
			wall, cpu := time.Since(start), cpuTime()-from
			// Every like record is there, the first and the last among them (keys that
			// shared a buffer would leave only the last of each transaction).
			if err := db.View(func(txn *cold.Txn) error {
				for _, i := range []int{0, b.N / 2, b.N - 1} {
					k := binary.BigEndian.AppendUint64([]byte{'L', 0, 3, 'r'}, uint64(i)*0x9E3779B97F4A7C15)
					if found, err := txn.Get(k, nil); err != nil || !found {
						b.Fatalf("the like record of user %d: found %v, %v", i, found, err)
					}
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e3, "cpu-µs/like")
			b.ReportMetric(float64(b.N)/wall.Seconds(), "likes/s")
			cores := float64(b.N) / cpu.Seconds() * float64(runtime.NumCPU())
			b.ReportMetric(cores, "likes/s-all-cores")
		})
	}
}

// cpuTime is the CPU this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
