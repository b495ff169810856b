package graph

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/tally-dev/tally/store/cold"
)

// BenchmarkLikes applies likes in transactions of 1 000, as an event stage does, and
// reports Badger entries written per like made (a like event of a pair liked already
// makes none), beside the layout
// before like records (a relation key and two list keys per like) in the same run. Two
// workloads: every like by a new user (the end-to-end benchmark's), and 20 000 users
// liking 100 posts each on average, Zipf-skewed, so that most likes are by heavy users.
// Posts are Zipf-skewed over 100 000 in both.
// Run: go test ./store/graph -run XXX -bench Likes -benchtime 1000000x
func BenchmarkLikes(b *testing.B) {
	for _, w := range []struct {
		name  string
		users int // 0: a new user for every like
	}{{"new-users", 0}, {"active-users", 20_000}} {
		for _, layout := range []string{"records-and-chunks", "key-per-list"} {
			b.Run(w.name+"/"+layout, func(b *testing.B) {
				db, err := cold.Open(cold.Options{Dir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				posts := rand.NewZipf(rand.New(rand.NewPCG(2, 2)), 1.1, 1, 99_999)
				var users *rand.Zipf
				if w.users > 0 {
					users = rand.NewZipf(rand.New(rand.NewPCG(3, 3)), 1.05, 1, uint64(w.users-1))
				}
				puts, made, bytes0 := badgerPuts(), 0, badgerBytes()
				res := NewResident[testReader](64 << 20)
				b.ResetTimer()
				for i := 0; i < b.N; i += 1000 {
					var l *Likes
					err := db.Update(func(txn *cold.Txn) error {
						l = NewLikes(0, res)
						for j := i; j < min(i+1000, b.N); j++ {
							u := uint64(j + 1)
							if users != nil {
								u = 1 + users.Uint64()
							}
							post, ts := 1<<41+posts.Uint64(), int64(1_700_000_000_000+j/10) // 10 likes a millisecond
							var changed bool
							var err error
							if layout == "key-per-list" {
								changed, err = likeKeyPerList(txn, u, post, ts, uint64(j+1))
							} else {
								changed, err = l.like(txn, u, post, ts, uint64(j+1))
							}
							if err != nil {
								return err
							}
							if changed {
								made++
							}
						}
						return l.Flush(txn, uint64(i+1))
					})
					if err != nil {
						b.Fatal(err)
					}
					res.Keep(nil, l)
				}
				b.StopTimer()
				b.ReportMetric(float64(badgerPuts()-puts)/float64(made), "badger-puts/like")
				b.ReportMetric(float64(made)/float64(b.N), "new/like-event")
				b.ReportMetric(float64(badgerBytes()-bytes0)/float64(made), "badger-B/like")
			})
		}
	}
}

// likeKeyPerList is a like in the layout before like records: relation, the user's
// list and the post's list, each a key (what moveLikes moves).
func likeKeyPerList(txn *cold.Txn, u, post uint64, ts int64, seq uint64) (bool, error) {
	rel := Rel{A: u, B: post}
	if found, err := txn.Get(relKey(0, Like, rel), nil); err != nil || found {
		return false, err
	}
	v := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(ts)), seq)
	if err := txn.Set(relKey(0, Like, rel), v); err != nil {
		return false, err
	}
	if err := txn.Set(subjectKey(0, Like, rel, ts), nil); err != nil {
		return false, err
	}
	return true, txn.Set(objectKey(0, Like, rel, ts), nil)
}

func badgerBytes() int64 { return cold.Counted().Bytes }
