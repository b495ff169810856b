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
