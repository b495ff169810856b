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
