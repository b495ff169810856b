package hot

import "slices"

// directory finds a group by its key (id >> 40) with one bounds check and one load, where
// a map costs a hash and a probe on every id. Snowflake groups are consecutive keys (one
// every 4.4 minutes), so a slice indexed by key − lo covers them with few holes; the
// groups outside that window (ids that are not snowflakes, or far from the rest) are
// found in the table's map, which holds every group.
type directory struct {
	lo   uint32   // key of win[0]
	win  []*group // win[gk-lo]; nil where no group; cap beyond len is room to grow into
	in   int      // groups in win
	far  int      // groups outside win's range
	next int      // far count at which the window is chosen again
}

// get returns group gk if it is in the window; far reports whether the map must be
// asked instead.
func (d *directory) get(gk uint32) (g *group, far bool) {
	if i := gk - d.lo; i < uint32(len(d.win)) {
		return d.win[i], false
	}
	return nil, d.far > 0
}

// add records a new group gk; all is every group, gk's included.
func (d *directory) add(gk uint32, g *group, all map[uint32]*group) {
	i := gk - d.lo
	if i < uint32(len(d.win)) {
		d.win[i] = g
		d.in++
		return
	}
	d.far++ // until the window covers it
	switch {
	case d.in > 0 && i < uint32(cap(d.win)):
		d.extend(int(i)+1, all) // time moved on into the room left above the window
	case d.in == 0 || i < 2*uint32(len(d.win))+64 || d.far >= d.next:
		d.place(all)
	}
}

// extend lengthens the window to n slots, taking in the far groups it now covers.
func (d *directory) extend(n int, all map[uint32]*group) {
	old := len(d.win)
	d.win = d.win[:n]
	for i := old; i < n; i++ {
		if g := all[d.lo+uint32(i)]; g != nil {
			d.win[i] = g
			d.in++
			d.far--
		}
	}
}

// del forgets group gk, which all no longer holds.
func (d *directory) del(gk uint32) {
	if i := gk - d.lo; i < uint32(len(d.win)) {
		d.win[i] = nil
		d.in--
		return
	}
	d.far--
}

// place chooses the window again: the range of keys holding the most groups with at
// least one group in four of its slots, the newest such range on a tie (time moves up),
// with as much room again above it. Choosing only when the far groups have doubled, or
// time moved past the window, keeps the cost per new group constant.
func (d *directory) place(all map[uint32]*group) {
	keys := make([]uint32, 0, len(all))
	for gk := range all {
		keys = append(keys, gk)
	}
	slices.Sort(keys)
	best, bestN := 0, 0
	for i, j := 0, 0; j < len(keys); j++ {
		for uint64(keys[j]-keys[i])+1 > 4*uint64(j-i+1)+64 {
			i++
		}
		if j-i+1 >= bestN {
			best, bestN = i, j-i+1
		}
	}
	d.win, d.in, d.far = nil, 0, len(keys)
	if bestN > 0 {
		lo, hi := keys[best], keys[best+bestN-1]
		span := int(hi-lo) + 1
		d.lo, d.win = lo, make([]*group, span, 2*span+16)
		for _, gk := range keys[best : best+bestN] {
			d.win[gk-lo] = all[gk]
		}
		d.in, d.far = bestN, len(keys)-bestN
	}
	d.next = 2*d.far + 16
}

// bytes is the directory's RAM.
func (d *directory) bytes() int { return 8 * cap(d.win) }
