package graph

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/cold/coldtest"
)

// BenchmarkRestoreOldLayout restores one event partition of 200 000 likes (20 000 users,
// 100 of them heavy) from a backup of the layout before like records, which moves them
// to like records and liker chunks as it restores, beside the baseline: the same
// partition restored from its backup in this layout. The move is paid once per
// partition, at its first takeover or standby prime after an upgrade.
// Run: go test ./store/graph -run XXX -bench RestoreOldLayout -benchtime 1x
func BenchmarkRestoreOldLayout(b *testing.B) {
	const p = 2
	r := rand.New(rand.NewPCG(1, 2))
	m := newLikeModel()
	src := coldtest.Open(b, cold.Options{Upgrade: Upgrade})
	for range 20 {
		writeOldLikes(b, src, p, m, r, 20_000, 50_000, 10_000, 100, 40)
	}
	likes := 0
	for _, ls := range m.likes {
		likes += len(ls)
	}
	old := backupAs(b, src, cold.EventKeys(p), backupMagicV2, 0)
	restore := func(backup []byte) (*cold.DB, time.Duration) {
		db := coldtest.Open(b, cold.Options{Upgrade: Upgrade})
		start := time.Now()
		if err := db.Restore(bytes.NewReader(backup), cold.EventKeys(p), b.TempDir()); err != nil {
			b.Fatal(err)
		}
		return db, time.Since(start)
	}
	var moved, plain time.Duration
	for b.Loop() {
		var db *cold.DB
		db, moved = restore(old)
		_, plain = restore(backupAs(b, db, cold.EventKeys(p), backupMagic, cold.Layout))
	}
	b.ReportMetric(float64(moved.Nanoseconds())/float64(likes), "old-layout-ns/like")
	b.ReportMetric(float64(plain.Nanoseconds())/float64(likes), "this-layout-ns/like")
	b.ReportMetric(float64(len(old))/float64(likes), "old-backup-B/like")
}
