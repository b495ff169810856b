package event

import (
	"math/rand/v2"
	"testing"

	"github.com/tally-dev/tally/pipeline"
)

// BenchmarkCoalescer is what an event stage's transaction pays a counter change: views
// of posts drawn by Zipf from 1 M, with their likers' unread likes in a second family
// (likes), the windows on, 2 000 changes a transaction, as in EndToEnd's mixes.
func BenchmarkCoalescer(b *testing.B) {
	for _, mix := range []string{"views", "likes"} {
		b.Run(mix, func(b *testing.B) {
			c := newCoalescer(16)
			view, unread := fieldRef{family: "post", field: 3}, fieldRef{family: "unread", field: 2}
			z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, 1<<20)
			ids := make([]pipeline.ID, 1<<16)
			for i := range ids {
				ids[i] = pipeline.ID(z.Uint64() + 1)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if i%2000 == 0 {
					c.reset()
					c.minute = 29_000_000 + uint32(i/20_000)
				}
				id := ids[i%len(ids)]
				c.add(view, id, pipeline.OpAdd, 1)
				if mix == "likes" {
					c.add(unread, id^0x5555, pipeline.OpAdd, 1)
				}
			}
		})
	}
}
