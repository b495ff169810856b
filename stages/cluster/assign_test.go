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
			got := Assign(members, held, nil, parts, Said{})
			if again := Assign(slices.Clone(members), slices.Clone(held), nil, parts, Said{}); !slices.Equal(got, again) {
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
		back := Assign(members, lapsed, held, parts, Said{})
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
			got := Assign(members, live, nil, parts, Said{})
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
			holders := Assign(members, make([]string, parts), nil, parts, Said{})
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
				got := Assign(live, held, last, parts, Said{})
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

// A member joining gets its share (Assign's target) one partition at a time, each as
// its standby of it turns warm: until then the live holder keeps it (Effective), and
// the target does not change under the hand-over — once the holder has let a partition
// go, and before the joiner has taken it, Assign still gives it to the joiner. A
// member keeping no standbys is given its share at once; a partition whose holder is
// gone goes to its target.
func TestEffective(t *testing.T) {
	for _, parts := range []int{7, 16, 64} {
		var members []string
		held := make([]string, parts)
		for n := 1; n <= 5; n++ {
			joiner := fmt.Sprintf("node%02d", 17*n%23)
			members = append(members, joiner)
			slices.Sort(members)
			target := Assign(members, held, nil, parts, Said{})
			if got := Effective(members, held, target, map[string]map[int]bool{joiner: nil}); !slices.Equal(got, target) {
				t.Fatalf("%d partitions: a joiner keeping no standbys waits: %v, want %v", parts, got, target)
			}
			warm := map[string]map[int]bool{joiner: {}}
			eff := Effective(members, held, target, warm)
			due := Due(joiner, target, eff)
			if n > 1 && (!slices.Equal(eff, held) || len(due) == 0) {
				t.Fatalf("%d partitions: with no standby warm, %v moved to %v (due %v)", parts, held, eff, due)
			}
			for q, h := range held { // free ones are taken at once
				if h == "" {
					held[q] = eff[q]
				}
			}
			for _, p := range due {
				warm[joiner][p] = true
				eff := Effective(members, held, Assign(members, held, nil, parts, Said{Warm: warm}), warm)
				if eff[p] != joiner {
					t.Fatalf("%d partitions: %d warm on %s, effective gives it to %s", parts, p, joiner, eff[p])
				}
				for q := range eff {
					if q != p && eff[q] != held[q] {
						t.Fatalf("%d partitions: %d warm on %s, and %d moved too (%s → %s)", parts, p, joiner, q, held[q], eff[q])
					}
				}
				// The holder lets it go; the joiner has not taken it yet.
				last := make([]string, parts)
				last[p], held[p] = held[p], ""
				if got := Effective(members, held, Assign(members, held, last, parts, Said{Warm: warm}), warm); got[p] != joiner {
					t.Fatalf("%d partitions: %d released by %s for %s, then assigned to %s", parts, p, last[p], joiner, got[p])
				}
				held[p] = joiner
			}
			if !slices.Equal(held, target) {
				t.Fatalf("%d partitions, %d members: hand-overs ended at %v, target %v", parts, n, held, target)
			}
		}
		// A holder gone: its partitions go to their targets, warm or not.
		dead := members[0]
		live := members[1:]
		gone := slices.Clone(held)
		target := Assign(live, gone, nil, parts, Said{})
		if got := Effective(live, gone, target, map[string]map[int]bool{live[0]: {}}); !slices.Equal(got, target) {
			t.Fatalf("%d partitions: %s dead, effective %v, target %v", parts, dead, got, target)
		}
	}
}

// An owner that dies while one of its partitions is moving to another member, whose
// standby of it is warm, leaves that partition to the member with the warm copy when
// its Standbys member's copy is not warm: it is taken over, not restored.
func TestAssignPrefersWarm(t *testing.T) {
	for _, parts := range []int{8, 16, 64} {
		members := []string{"a", "b", "c"}
		holders := Assign(members, make([]string, parts), nil, parts, Said{})
		live := []string{"b", "c"}
		sb := Standbys(live, holders)
		for p, h := range holders {
			if h != "a" {
				continue
			}
			other := "b"
			if sb[p] == "b" {
				other = "c"
			}
			warm := map[string]map[int]bool{sb[p]: {}, other: {p: true}} // sb[p]'s copy not warm yet
			held, last := slices.Clone(holders), make([]string, parts)
			for q := range held {
				if held[q] == "a" {
					held[q], last[q] = "", "a"
				}
			}
			if got := Assign(live, held, last, parts, Said{Warm: warm}); got[p] != other {
				t.Fatalf("P=%d: a dead, partition %d warm on %s only, assigned to %s (standby %s)", parts, p, other, got[p], sb[p])
			}
		}
	}
}

// Every lease lapsed, and some partitions' last owners are still stopping them (their
// stops took longer than a lease TTL, see View.Stopping): each of those goes to its
// standby, which keeps a warm copy of it, not to its last owner (who could not start it
// again before the stop is over) nor to whichever member ranks it highest; the others go
// back to their last owners.
func TestAssignStoppingToStandby(t *testing.T) {
	members := []string{"a", "b"}
	for _, parts := range []int{2, 4, 6, 8, 12} {
		last := Assign(members, make([]string, parts), nil, parts, Said{})
		sb := Standbys(members, last)
		for k := 1; k <= parts/2; k++ { // each member stopping k of its partitions
			stopping := map[string]map[int]bool{"a": {}, "b": {}}
			for p, o := range last {
				if len(stopping[o]) < k {
					stopping[o][p] = true
				}
			}
			got := Assign(members, make([]string, parts), last, parts, Said{Stopping: stopping})
			for p := range got {
				want := last[p]
				if stopping[last[p]][p] {
					want = sb[p]
				}
				if got[p] != want {
					t.Fatalf("P=%d, stopping %v: partition %d (last owner %s) assigned to %s, want %s (%v → %v)", parts, stopping, p, last[p], got[p], want, last, got)
				}
			}
		}
	}
}

// A partition another member refused (its backup cannot be read: View.Refused) goes to
// its last owner even when that one holds its share already: the last owner alone keeps
// its state. Here a holds its share, and its other partitions, free, were refused by b;
// without the refusal they go to b, who has room.
func TestAssignRefusedToLastOwner(t *testing.T) {
	members := []string{"a", "b", "c"}
	for _, parts := range []int{3, 4, 6, 9, 16} {
		for k := 1; k <= parts/3; k++ { // a's partitions free, k of them refused
			share := (parts + 2) / 3
			held, last := make([]string, parts), make([]string, parts)
			refused := map[string]map[int]bool{"b": {}}
			for p := range parts {
				switch {
				case p < share:
					held[p] = "a"
				case p < share+k:
					last[p] = "a"
					refused["b"][p] = true
				default:
					last[p] = []string{"b", "c"}[p%2]
				}
			}
			for _, said := range []Said{{}, {Refused: refused}} {
				got := Assign(members, held, last, parts, said)
				load := map[string]int{}
				for p, m := range got {
					load[m]++
					want := last[p]
					if held[p] != "" {
						want = held[p]
					}
					if refused["b"][p] && said.Refused == nil {
						want = "" // anyone's but a's, who has no room
					}
					if m == "" || want != "" && m != want || want == "" && m == "a" {
						t.Fatalf("P=%d, %d refused, %+v: partition %d (held by %q, last owner %q) assigned to %q (%v)", parts, k, said, p, held[p], last[p], m, got)
					}
				}
				if over := load["a"] - share; said.Refused != nil && over != k || load["b"]+load["c"]+load["a"] != parts {
					t.Fatalf("P=%d, %d refused: loads %v", parts, k, load)
				}
			}
		}
	}
}
