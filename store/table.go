package store

// Table maps an id to a fixed number of unsigned counters (the family's fields).
//
// Counters never go below zero: adding a negative amount larger than the value leaves
// zero. When every counter of an id is zero the entry is removed, so Len counts only ids
// with at least one non-zero counter.
type Table interface {
	// Fields is the number of counters per id.
	Fields() int
	// Add adds n (which may be negative) to counter f of id and returns the new value.
	Add(id uint64, f int, n int64) uint64
	// Set sets counter f of id to v.
	Set(id uint64, f int, v uint64)
	// Get copies the counters of id into dst (len(dst) == Fields()) and reports
	// whether id has any non-zero counter; dst is all zeros when it has none.
	Get(id uint64, dst []uint64) bool
	// Put replaces all counters of id (len(counts) == Fields()); all zeros deletes.
	Put(id uint64, counts []uint64)
	// Len is the number of ids with a non-zero counter.
	Len() int
	// Range calls fn for every id with its counters until fn returns false. counts is
	// only valid during the call. The table must not be modified during Range.
	Range(fn func(id uint64, counts []uint64) bool)
	// Dirty calls fn for every id changed since ClearDirty, with its counters (all zeros
	// for an id deleted since), until fn returns false: what a checkpoint must write.
	Dirty(fn func(id uint64, counts []uint64) bool)
	// ClearDirty forgets what changed (after a checkpoint).
	ClearDirty()
}

// AddSat returns v+n clamped to [0, max uint64].
func AddSat(v uint64, n int64) uint64 {
	if n >= 0 {
		s := v + uint64(n)
		if s < v {
			return ^uint64(0)
		}
		return s
	}
	d := uint64(-n)
	if n == -1<<63 {
		d = 1 << 63
	}
	if d >= v {
		return 0
	}
	return v - d
}
