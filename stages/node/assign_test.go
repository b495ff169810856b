package node

import (
	"fmt"
	"slices"
	"testing"
)

// assign spreads the partitions evenly, agrees with itself, and moves few partitions
// when a member joins or leaves.
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
	for _, parts := range []int{1, 7, 16, 64} {
		var members []string
		prev := []string(nil)
		for n := 1; n <= 6; n++ {
			members = append(members, fmt.Sprintf("node%02d", 17*n%23))
			slices.Sort(members)
			got := assign(members, parts)
			if again := assign(slices.Clone(members), parts); !slices.Equal(got, again) {
				t.Fatalf("%d partitions, %d members: two answers %v and %v", parts, n, got, again)
			}
			for _, m := range members {
				if l := load(got)[m]; l < parts/n || l > (parts+n-1)/n {
					t.Fatalf("%d partitions over %d members: %s has %d (%v)", parts, n, m, l, got)
				}
			}
			// A joining member takes its share; keeping the loads equal moves up to as many
			// again between the others, and the rest stays where it was.
			if prev != nil {
				if m := moved(prev, got); m > 2*((parts+n-1)/n) {
					t.Fatalf("%d partitions: member %d moved %d of them (%v → %v)", parts, n, m, prev, got)
				}
			}
			prev = got
		}
	}
}
