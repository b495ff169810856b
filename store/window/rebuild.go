package window

import (
	"encoding/binary"
	"slices"
)

// rebuild makes the leaves again from the live ids of the leaves and of fresh, which it
// empties. Pruning, it drops the changes below the floor, calls gone with every id left
// with none, and counts the bodies from the floor; else the leaves' items are copied
// as they are, a run of them at a time, and only those after a dead id or a fresh one
// are encoded again.
func (t *Table) rebuild(prune bool, gone func(id uint64)) {
	ids := make([]uint64, 0, t.fresh.ids)
	for i, r := range t.fresh.refs {
		if r != 0 {
			ids = append(ids, t.fresh.keys[i])
		}
	}
	slices.Sort(ids)
	old, epoch := &t.leaves, t.epoch
	if prune {
		t.epoch = t.floor
	}
	n := old.live + len(ids)
	cuts := (n + leafIDs - 1) / leafIDs
	out := leaves{
		before: make([]uint64, 0, cuts),
		start:  make([]uint32, 0, cuts),
		dead:   make([]uint64, 0, (n+63)/64),
		// A distance may take a byte more than it did, once a leaf, or three where
		// fresh held none.
		data: make([]byte, 0, len(old.data)-old.deadBytes+len(t.fresh.arena)-t.fresh.garbage+3*len(ids)+cuts),
	}
	// put encodes an item (a body's length and the body) again.
	put := func(id uint64, item []byte) {
		if prune {
			_, k := uvarint(item)
			t.scratch = merge(decodeBody(t.scratch[:0], item[k:], epoch), Change{}, t.floor)
			if len(t.scratch) == 0 {
				if gone != nil {
					gone(id)
				}
				return
			}
			t.buf = appendBody(t.buf[:0], t.scratch, t.epoch)
			b := len(t.buf)
			t.buf = append(binary.AppendUvarint(t.buf, uint64(b)), t.buf[:b]...)
			item = t.buf[b:]
		}
		out.pushItem(id, item)
	}
	putFresh := func(id uint64) {
		i, _ := t.fresh.slot(id)
		off := int(t.fresh.refs[i] - 1)
		n, k := uvarint(t.fresh.arena[off:])
		put(id, t.fresh.arena[off:off+k+int(n)])
	}
	// old.data[from:to] is a run of items copied as they are, not yet appended.
	from, to := 0, 0
	flush := func() {
		out.data = append(out.data, old.data[from:to]...)
		from = to
	}
	j := 0 // the next of ids
	for leaf, id := range old.before {
		p, end := int(old.start[leaf]), old.end(leaf)
		for place := leaf * leafIDs; p < end; place++ {
			d, body, next := old.item(p)
			prev := id
			id += d
			if old.isDead(place) {
				p = next
				continue
			}
			for ; j < len(ids) && ids[j] < id; j++ {
				flush()
				putFresh(ids[j])
			}
			switch {
			case prune || out.last != prev:
				flush()
				put(id, old.data[body-uvarintLen(next-body):next])
			default: // its distance holds: copied
				if to != p {
					flush()
					from, to = p, p
				}
				out.cut(len(out.data) + p - from)
				out.last = id
				to = next
			}
			p = next
		}
	}
	flush()
	for _, id := range ids[j:] {
		putFresh(id)
	}
	if prune && cap(out.data) > len(out.data)+len(out.data)/64 {
		// The changes dropped made the estimate high, and Prune is when the arena
		// settles: what a table holds most of the time.
		out.data = slices.Clone(out.data)
	}
	out.index()
	t.leaves, t.fresh = out, newFresh()
}
