package hot

// Layout counts t's groups by the form of their index — run lengths, a fence of one
// slice a bucket, a finer fence — and the groups the directory's window does not hold.
func Layout(t *Table) (runs, coarse, fine, far int) {
	for _, g := range t.groups {
		switch {
		case g.cnt != nil:
			runs++
		case g.fence != nil && g.shift == 32:
			coarse++
		case g.fence != nil:
			fine++
		}
	}
	return runs, coarse, fine, t.dir.far
}

// DirtyLeft counts the buckets and groups with a dirty bitmap: none after ClearDirty,
// whatever the table went through (their keys are listed wherever a bitmap is made).
func DirtyLeft(t *Table) int {
	n := 0
	for _, b := range t.buckets {
		if b.dirty != nil {
			n++
		}
	}
	for _, g := range t.groups {
		if g.dirty != nil {
			n++
		}
	}
	return n
}

// MemWalk is MemBytes by a walk of every group and bucket: what its running total must
// equal.
func MemWalk(t *Table) int {
	n := 8*cap(t.deleted) + 8*cap(t.scratch) + t.dir.bytes()
	for _, b := range t.buckets {
		n += b.bytes()
	}
	for _, g := range t.groups {
		n += g.bytes()
	}
	return n
}

// MemStale reports whether MemBytes is to walk the whole table at its next call.
func MemStale(t *Table) bool { return t.memStale }
