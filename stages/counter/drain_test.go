package counter

import (
	"context"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
	"github.com/tally-dev/tally/store/delivery"
)

// A worker whose lease lapses while it drains its change events on a stop (owned when
// the drain began, not when it goes to send the next checkpoint's) stops draining:
// nothing is in flight and sendChanges sends nothing for a partition that may be
// another's, so the drain went round for ever and the partition's stop with it (a
// tallyd's Close hung in stopPart under TestHandOversExact).
func TestDrainEndsWhenNoLongerOwned(t *testing.T) {
	db, err := cold.Open(cold.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	asked := 0
	w := &Worker{db: db, cfg: Config{Family: pipeline.Family{Name: "post"}, Valid: func() bool {
		asked++
		return asked == 1 // held when the drain begins, lapsed after
	}}}
	w.chg = changes{pending: [][]delivery.OutboxEntry{{{Seq: changeSeq(1, 0), Subject: "tally.chg.post.0", MsgID: "c", Data: []byte("{}")}}}}
	done := make(chan error, 1)
	go func() { done <- w.drainChanges(context.Background(), time.Second) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the drain of a worker whose lease lapsed did not end")
	}
}
