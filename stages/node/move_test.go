package node

import (
	"testing"
	"time"
)

// A free partition goes back to its last owner, unless that one says it is still
// stopping it: then to its warm standby. A lost partition's stop took up to 10 minutes
// under a 27 M-id backlog (its last checkpoint behind Badger's compactions), and the
// others left the partition to its last owner all that time: owned by nobody.
func TestLostPartitionNotLeftToItsStoppingOwner(t *testing.T) {
	r := newPartRig(t)
	a, b := r.process(), r.process()
	// a owned partition 0 (the pointer names it); its lease is gone.
	la := r.take(a)
	if _, err := a.backups.Claim(t.Context(), a.counterPiece(0), la); err != nil {
		t.Fatal(err)
	}
	la.Release(t.Context())
	b.owners.SetWarm([]int{0})
	plan := func(stopping []int) string {
		t.Helper()
		a.owners.SetStopping(stopping)
		for _, n := range []*Node{a, b} {
			if err := n.owners.Register(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		_, _, want, err := b.plan(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return want[0]
	}
	if got := plan(nil); got != a.owners.ID() {
		t.Fatalf("partition 0 planned for %s, want its last owner %s", got, a.owners.ID())
	}
	if got := plan([]int{0}); got != b.owners.ID() {
		t.Fatalf("partition 0 planned for %s while its last owner is stopping it, want its standby %s", got, b.owners.ID())
	}
}

// A process says it is stopping a partition only once the stop has taken longer than a
// lease TTL: a lapse of every lease (the ownership bucket without a leader) leaves each
// partition to its last owner, whose stops are quick.
func TestStoppingPartsAfterATTL(t *testing.T) {
	n := &Node{cfg: Config{LeaseTTL: time.Second}, stopping: map[int]time.Time{
		3: time.Now().Add(-2 * time.Second), 5: time.Now(),
	}}
	if got := n.stoppingParts(); len(got) != 1 || got[0] != 3 {
		t.Fatalf("stopping %v, want [3]", got)
	}
}
