package cluster

import (
	"fmt"
	"slices"
	"testing"
)

// Assign keeps partitions with their live holders: a member joining takes its
// share and nothing else moves; a member leaving moves only what it held; every member
// gets ⌊P/n⌋ or ⌈P/n⌉; and it agrees with itself.
func TestAssign(t *testing.T) {
	load := func(owners []string) map[string]int {
		m := map[string]int{}
		for _, o := range owners {
			m[o]++
		}
		return m
	}
	moved := func(a, b []string) int {
		n := 0
		for p := range a {
			if a[p] != b[p] {
				n++
			}
		}
		return n
	}
	even := func(got, members []string, parts int) {
		t.Helper()
		n := len(members)
		for _, m := range members {
			if l := load(got)[m]; l < parts/n || l > (parts+n-1)/n {
				t.Fatalf("%d partitions over %d members: %s has %d (%v)", parts, n, m, l, got)
			}
		}
	}
	for _, parts := range []int{1, 7, 16, 64} {
		var members []string
		held := make([]string, parts) // nobody holds anything yet
		for n := 1; n <= 6; n++ {
			joiner := fmt.Sprintf("node%02d", 17*n%23)
			members = append(members, joiner)
			slices.Sort(members)
			got := Assign(members, held, nil, parts)
			if again := Assign(slices.Clone(members), slices.Clone(held), nil, parts); !slices.Equal(got, again) {
				t.Fatalf("%d partitions, %d members: two answers %v and %v", parts, n, got, again)
			}
			even(got, members, parts)
			if n > 1 && moved(held, got) != load(got)[joiner] {
				t.Fatalf("%d partitions: member %d took %d, but %d moved (%v → %v)", parts, n, load(got)[joiner], moved(held, got), held, got)
			}
			held = got
		}
		// Every lease lapses at once (the bucket had no leader for longer than the TTL):
		// the partitions go back to their last owners, but for the ⌈P/n⌉ rooms, which now
		// go by name; without the last owners they would be dealt afresh.
		lapsed := make([]string, parts)
		back := Assign(members, lapsed, held, parts)
		even(back, members, parts)
		if m := moved(held, back); m > len(members) {
			t.Fatalf("%d partitions: %d moved when every lease lapsed (%v → %v)", parts, m, held, back)
		}
		for len(members) > 1 { // members leave, last joined first
			leaver := members[len(members)/2]
			members = slices.DeleteFunc(members, func(m string) bool { return m == leaver })
			live := slices.Clone(held)
			for p, h := range live {
				if h == leaver {
					live[p] = "" // its lease expired
				}
			}
			got := Assign(members, live, nil, parts)
			even(got, members, parts)
			if m := moved(held, got); m != load(held)[leaver] {
				t.Fatalf("%d partitions: %s left holding %d, but %d moved (%v → %v)", parts, leaver, load(held)[leaver], m, held, got)
			}
			held = got
		}
	}
}

// Each owner's partitions are kept warm by the other members evenly, the choice is the
// same after the owner dies (its partitions' last owner), and Assign then gives each of
// the dead one's partitions to its standby: none is restored from a backup.
func TestStandbys(t *testing.T) {
	for _, n := range []int{2, 3, 4, 7} {
		for _, parts := range []int{16, 64} {
			var members []string
			for i := range n {
				members = append(members, fmt.Sprintf("m%02d", i))
			}
			holders := Assign(members, make([]string, parts), nil, parts)
			sb := Standbys(members, holders)
			per := map[string]map[string]int{} // owner → standby → partitions
			for p, s := range sb {
				if s == "" || s == holders[p] {
					t.Fatalf("n=%d P=%d: partition %d of %s has standby %q", n, parts, p, holders[p], s)
				}
				if per[holders[p]] == nil {
					per[holders[p]] = map[string]int{}
				}
				per[holders[p]][s]++
			}
			for o, by := range per {
				lo, hi, owned := parts, 0, 0
				for _, k := range by {
					lo, hi, owned = min(lo, k), max(hi, k), owned+k
				}
				if len(by) != min(n-1, owned) || hi-lo > 1 {
					t.Fatalf("n=%d P=%d: %s's partitions kept warm by %v, want spread evenly over the %d others", n, parts, o, by, n-1)
				}
			}
			for _, dead := range members {
				live := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == dead })
				held, last := slices.Clone(holders), make([]string, parts)
				for p := range held {
					if held[p] == dead {
						held[p], last[p] = "", dead
					}
				}
				lastSB := Standbys(live, holders) // the dead one's partitions by their last owner
				got := Assign(live, held, last, parts)
				cold := 0
				for p := range holders {
					if holders[p] != dead {
						continue
					}
					if lastSB[p] != sb[p] {
						t.Fatalf("n=%d P=%d: %s dead, partition %d's standby %q, was %q", n, parts, dead, p, lastSB[p], sb[p])
					}
					if got[p] != sb[p] {
						cold++
					}
				}
				if cold > 0 {
					t.Fatalf("n=%d P=%d: %s dead, %d of its partitions assigned away from their standbys (%v, standbys %v)", n, parts, dead, cold, got, sb)
				}
			}
		}
	}
	if got := Standbys([]string{"a"}, []string{"a", "a"}); got[0] != "" || got[1] != "" {
		t.Fatalf("alone: standbys %q, want none", got)
	}
}
