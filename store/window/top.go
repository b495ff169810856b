package window

import (
	"cmp"
	"container/heap"
	"slices"
)

// Ranked is an id and its net change over a window.
type Ranked struct {
	ID uint64
	N  int64
}

// rank orders the most trending first: the larger change, then the smaller id, so that
// every partition and every merge of their lists agree on ties.
func rank(a, b Ranked) int {
	if c := cmp.Compare(b.N, a.N); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// Top returns, best first, the k ids whose field f changed the most at or after minute
// since (and the floor), each with that change; ids whose change is not positive are not
// ranked. It reads every record once: exact, whatever the table holds, in time linear in
// its records. Partitions' lists merge into the exact top of their union (Merge), since
// an id lives in one partition.
func (t *Table) Top(f uint8, since uint32, k int) []Ranked {
	if k <= 0 {
		return nil
	}
	since = max(since, t.floor)
	h := make(worst, 0, k)
	keep := func(id uint64, n int64) {
		r := Ranked{ID: id, N: n}
		switch {
		case n <= 0:
		case len(h) < k:
			heap.Push(&h, r)
		case rank(r, h[0]) < 0: // better than the worst kept
			h[0] = r
			heap.Fix(&h, 0)
		}
	}
	l := &t.leaves
	for leaf, hd := range l.heads {
		p, end, id := int(hd.start), l.end(leaf), hd.before()
		for p < end {
			d, body, next := l.item(p)
			id += d
			if !l.isDead(body) {
				if n := sumField(l.data[body:next], t.epoch, since, f); n > 0 {
					keep(id, n)
				}
			}
			p = next
		}
	}
	for i, ref := range t.fresh.refs {
		if ref != 0 {
			keep(t.fresh.keys[i], sumField(t.fresh.body(i), t.epoch, since, f))
		}
	}
	slices.SortFunc(h, rank)
	return h
}

// Merge returns, best first, the k best of lists (each as Top returns them).
func Merge(k int, lists ...[]Ranked) []Ranked {
	var all []Ranked
	for _, l := range lists {
		all = append(all, l...)
	}
	slices.SortFunc(all, rank)
	return all[:min(k, len(all))]
}

// worst is a heap of the ranked kept so far, the worst of them on top.
type worst []Ranked

func (h worst) Len() int           { return len(h) }
func (h worst) Less(i, j int) bool { return rank(h[i], h[j]) > 0 }
func (h worst) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *worst) Push(x any)        { *h = append(*h, x.(Ranked)) }
func (h *worst) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
