package cluster

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
)

// Assign gives each partition one of members (sorted, non-empty), keeping where it
// can the partitions where holders (the live holder of each partition, "" when none)
// says they are: every member gets ⌊P/n⌋ or ⌈P/n⌉ partitions and keeps
// what it holds up to its room, giving up first those it ranks lowest; the rest go, each
// to its last owner (last, "" when unknown) when that one is live, has room and is not
// stopping it (said.Stopping: it could not start it again before that stop is over) —
// even without room when another member has refused it (said.Refused: its backup cannot
// be read, and the last owner alone keeps its state) — else to
// the member keeping a copy of it (Standbys) when it has room and that copy is warm (or
// its warmth unknown: said.Warm says nothing of it), else to another member
// with room whose standby of it is warm (a member it was moving to when its owner died),
// else to its Standbys member when it has room, else to the member
// with room that ranks it highest (rendezvous hashing). So a member joining
// moves its own share only, and a member leaving moves only what it held
// (TestAssign). Members compute it from what they read of the holders; while a
// hand-over is under way two may want the same partition, and its lease decides.
func Assign(members, holders, last []string, partitions int, said Said) []string {
	warm := said.Warm
	n := len(members)
	held := map[string][]int{}
	for p, h := range holders {
		if p < partitions && slices.Contains(members, h) {
			held[h] = append(held[h], p)
		}
	}
	// The ⌈P/n⌉ rooms go to the members holding most (then by name), so that a member's
	// room shrinks only below what it holds when the members change.
	byHeld := slices.Clone(members)
	slices.SortStableFunc(byHeld, func(a, b string) int { return cmp.Compare(len(held[b]), len(held[a])) })
	room := map[string]int{}
	for i, m := range byHeld {
		room[m] = partitions / n
		if i < partitions%n {
			room[m]++
		}
	}
	score := func(m string, p int) uint64 {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%d", m, p)
		return h.Sum64()
	}
	out := make([]string, partitions)
	for _, m := range members {
		ps := held[m]
		slices.SortFunc(ps, func(a, b int) int { return cmp.Compare(score(m, b), score(m, a)) }) // best first
		for _, p := range ps[:min(len(ps), room[m])] {
			out[p] = m
			room[m]--
		}
	}
	refused := func(p int) bool {
		for _, m := range members {
			if said.Refused[m][p] {
				return true
			}
		}
		return false
	}
	for p, m := range last { // free partitions back to their last owners, while they have room
		_, member := room[m]
		if p < partitions && out[p] == "" && member && !said.Stopping[m][p] && (room[m] > 0 || refused(p)) {
			out[p] = m
			room[m]-- // below 0 for a refused one: the others' rooms still hold the rest
		}
	}
	// The others to the member keeping a warm copy of them (see Standbys), while it has
	// room: a standby follows the last owner, stopping or not.
	owner := make([]string, partitions)
	for p := range owner {
		if p < len(holders) && slices.Contains(members, holders[p]) {
			owner[p] = holders[p]
		} else if p < len(last) {
			owner[p] = last[p]
		}
	}
	sbs := Standbys(members, owner)
	give := func(p int, m string) {
		if out[p] == "" && m != "" && room[m] > 0 {
			out[p] = m
			room[m]--
		}
	}
	for p, m := range sbs {
		if warm[m] == nil || warm[m][p] {
			give(p, m)
		}
	}
	for p := range out {
		for _, m := range members {
			if warm[m][p] {
				give(p, m)
			}
		}
	}
	for p, m := range sbs {
		give(p, m)
	}
	for p := range out {
		if out[p] != "" {
			continue
		}
		best := ""
		for _, m := range members {
			if room[m] > 0 && (best == "" || score(m, p) > score(best, p)) {
				best = m
			}
		}
		out[p] = best
		room[best]--
	}
	return out
}

// Standbys names, for each partition, the member that keeps a warm copy of its state
// (stages/node's standby.go) while owner[p] owns it ("" for none: owner unknown or
// alone). Owner o's partitions, in order, go to the other members so that each would
// hold as many as any other if o died: the choice depends only on o, its partitions and
// the others' loads — the same before o dies and after, when a partition's owner is its
// last one — and Assign then hands every partition of a dead owner to its standby,
// which takes it over without a restore.
func Standbys(members, owner []string) []string {
	load := map[string]int{}
	for _, o := range owner {
		load[o]++
	}
	out := make([]string, len(owner))
	extra := map[string]map[string]int{} // o's partitions given to each other member so far
	for p, o := range owner {
		if o == "" {
			continue
		}
		if extra[o] == nil {
			extra[o] = map[string]int{}
		}
		// The member that would hold the fewest once o's partitions are its (then by
		// name, as Assign gives out the larger rooms): when o dies, every standby has room.
		best := ""
		for _, m := range members {
			if m == o {
				continue
			}
			if best == "" || load[m]+extra[o][m] < load[best]+extra[o][best] {
				best = m
			}
		}
		if best != "" {
			out[p] = best
			extra[o][best]++
		}
	}
	return out
}

// Effective is the assignment in force while target (Assign's) is being reached: a
// partition whose live holder is to hand it to a member that keeps standbys stays with
// its holder until that member's standby of it is warm (warm[m][p], see View.Warm), so
// that it moves as a standby takeover — a stop and a start — and not as a restore while
// it answers nothing. A member that keeps no standbys (no entry in warm) gets its
// partitions at once, as does everyone a partition nobody live holds. Every member
// computes the same from the same view.
func Effective(members, holders, target []string, warm map[string]map[int]bool) []string {
	out := slices.Clone(target)
	for p, m := range target {
		if p >= len(holders) {
			continue
		}
		h := holders[p]
		if h != "" && h != m && slices.Contains(members, h) && warm[m] != nil && !warm[m][p] {
			out[p] = h
		}
	}
	return out
}

// Due lists the partitions target gives member m that effective does not yet: m keeps
// a standby of each, which is what lets them move (Effective).
func Due(m string, target, effective []string) []int {
	var ps []int
	for p := range target {
		if target[p] == m && effective[p] != m {
			ps = append(ps, p)
		}
	}
	return ps
}
