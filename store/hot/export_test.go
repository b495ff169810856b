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
