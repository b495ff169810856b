package sketch

import (
	"encoding/binary"
	"math/bits"
	"slices"
)

const (
	// precision is log2 of the registers: 2^14 of them give a standard error of
	// 1.04/√16384 = 0.81 %.
	precision = 14
	registers = 1 << precision
	// maxRank is the largest register value: one more than the hash bits left after the
	// register index.
	maxRank = 64 - precision + 1
	// sparsePrecision is that of the sparse form's registers (HyperLogLog++'s): it keeps
	// only the registers set, so it can afford 2^25 of them, whose count is off by about
	// one user in 8 000 (1/√(2·2^25) of the users while few registers are set) where
	// 2^14 would be off by one in 150.
	sparsePrecision = 25
	sparseMaxRank   = 64 - sparsePrecision + 1
	// denseBytes is the dense form: 6 bits a register.
	denseBytes = registers * 6 / 8
	// sparseMax is the most registers the sparse form keeps (4 bytes each); past it the
	// dense form is smaller.
	sparseMax = denseBytes / 4
	// ExactMax is the most users a sketch keeps exactly (8 bytes each): a post seen by
	// that many or fewer has its viewers counted exactly.
	ExactMax = 128
)

// A sketch is stored in Chunks pieces, each of the users whose hash starts with its
// number (7 bits): adding a user changes one piece, so what a transaction writes grows
// with the pieces its events touch, never with a sketch's size. A piece is bounded too:
// past exactChunkMax users or sparseChunkMax registers in one piece (which only users
// chosen for their hashes reach) the sketch takes its next form, as it does past
// ExactMax or sparseMax in all.
const (
	chunkBits      = 7
	Chunks         = 1 << chunkBits
	exactChunkMax  = 32 // ≤ 32 varints of ≤ 9 bytes
	sparseChunkMax = 48 // ≤ 48 varints of ≤ 4 bytes
	// denseChunk is the bytes of a piece of the dense form: its 128 registers.
	denseChunk = denseBytes / Chunks
	// MaxChunk is the most bytes a piece takes stored (AppendChunk).
	MaxChunk = 2 + exactChunkMax*binary.MaxVarintLen64
)

// What Add reports besides a piece's number.
const (
	Unchanged = -1     // the user was counted already, or its register holds as much
	Reshaped  = Chunks // the sketch took its next form: every piece is to be stored again
)

// form is how a Sketch holds what it was given.
type form uint8

const (
	formExact  form = 1 // the users' hashes, ascending
	formSparse form = 2 // the registers set of 2^25, by index: index<<6 | rank, ascending
	formDense  form = 3 // every register, 6 bits each
)

// Sketch is a set of users, exact while small and estimated past ExactMax. Its zero
// value is the empty set.
type Sketch struct {
	form   form
	exact  []uint64 // formExact: hash(user), ascending, distinct
	sparse []uint32 // formSparse: index<<6 | rank, ascending by index
	dense  []byte   // formDense: denseBytes+1 (a pad byte so a register reads two bytes)
	// est is the estimated forms' count, kept until a register changes (0: to count
	// again): a popular post's registers rarely change, and counting them reads all
	// 12 KiB.
	est uint64
}

// hash mixes a user id into 64 bits that look random (MurmurHash3's finalizer). It is
// a bijection, so the exact form's hashes are as distinct as the users.
func hash(u uint64) uint64 {
	u ^= u >> 33
	u *= 0xff51afd7ed558ccd
	u ^= u >> 33
	u *= 0xc4ceb9fe1a85ec53
	u ^= u >> 33
	return u
}

// register is the register of hash h among 2^p and the rank it offers it: one more
// than the leading zeros of the bits after the index.
func register(h uint64, p int) (idx uint32, rank uint8) {
	return uint32(h >> (64 - p)), uint8(bits.LeadingZeros64(h<<p|1<<(p-1)) + 1)
}

// denseOf is the dense register and rank of the sparse form's register idx of rank:
// the first 14 bits of its index, and a rank from the 11 bits after them unless they
// are all zero (then the hash's rank among 2^25 counts from 11).
func denseOf(idx uint32, rank uint8) (uint32, uint8) {
	const extra = sparsePrecision - precision
	low := idx & (1<<extra - 1)
	if low == 0 {
		return idx >> extra, extra + rank
	}
	return idx >> extra, uint8(bits.LeadingZeros32(low<<(32-extra))) + 1
}

// The piece of an exact hash, a sparse register and a dense register.
func exactChunk(h uint64) int    { return int(h >> (64 - chunkBits)) }
func sparseChunk(idx uint32) int { return int(idx >> (sparsePrecision - chunkBits)) }
func denseChunkOf(idx uint32) int {
	return int(idx >> (precision - chunkBits))
}

// Add adds user u and reports what changed: Unchanged, the number of the one piece
// that did, or Reshaped.
func (s *Sketch) Add(u uint64) int { return s.addHash(hash(u)) }

func (s *Sketch) addHash(h uint64) int {
	switch s.form {
	case 0, formExact:
		i, found := slices.BinarySearch(s.exact, h)
		if found {
			return Unchanged
		}
		s.form = formExact
		s.exact = slices.Insert(s.exact, i, h)
		c := exactChunk(h)
		if len(s.exact) > ExactMax || s.inExact(c) > exactChunkMax {
			s.toSparse()
			return Reshaped
		}
		return c
	case formSparse:
		return s.setSparse(register(h, sparsePrecision))
	default:
		return s.setDense(register(h, precision))
	}
}

// inExact and inSparse count the entries of piece c.
func (s *Sketch) inExact(c int) int {
	lo, _ := slices.BinarySearch(s.exact, uint64(c)<<(64-chunkBits))
	hi := len(s.exact)
	if c+1 < Chunks {
		hi, _ = slices.BinarySearch(s.exact, uint64(c+1)<<(64-chunkBits))
	}
	return hi - lo
}

func (s *Sketch) inSparse(c int) int {
	lo, hi := s.sparseRange(c)
	return hi - lo
}

// sparseRange is where piece c lies in s.sparse.
func (s *Sketch) sparseRange(c int) (lo, hi int) {
	at := func(idx uint32) int {
		i, _ := slices.BinarySearchFunc(s.sparse, idx, func(e, idx uint32) int { return int(e>>6) - int(idx) })
		return i
	}
	lo, hi = at(uint32(c)<<(sparsePrecision-chunkBits)), len(s.sparse)
	if c+1 < Chunks {
		hi = at(uint32(c+1) << (sparsePrecision - chunkBits))
	}
	return lo, hi
}

// setSparse raises register idx (of 2^25) to rank. A register more than sparseMax in
// all, or sparseChunkMax in its piece, turns the sketch dense.
func (s *Sketch) setSparse(idx uint32, rank uint8) int {
	i, found := slices.BinarySearchFunc(s.sparse, idx, func(e, idx uint32) int { return int(e>>6) - int(idx) })
	if found {
		if uint8(s.sparse[i]&63) >= rank {
			return Unchanged
		}
		s.sparse[i] = idx<<6 | uint32(rank)
		s.est = 0
		return sparseChunk(idx)
	}
	if len(s.sparse) == sparseMax || s.inSparse(sparseChunk(idx)) == sparseChunkMax {
		s.toDense()
		s.setDense(denseOf(idx, rank))
		return Reshaped
	}
	if len(s.sparse) == cap(s.sparse) { // grow to no more than the dense form takes
		grown := make([]uint32, len(s.sparse), min(max(2*len(s.sparse), 8), sparseMax))
		s.sparse = grown[:copy(grown, s.sparse)]
	}
	s.sparse = slices.Insert(s.sparse, i, idx<<6|uint32(rank))
	s.est = 0
	return sparseChunk(idx)
}

// get and setDense read and write register idx of the dense form.
func (s *Sketch) get(idx uint32) uint8 {
	bit := idx * 6
	return uint8((uint16(s.dense[bit/8]) | uint16(s.dense[bit/8+1])<<8) >> (bit % 8) & 63)
}

func (s *Sketch) setDense(idx uint32, rank uint8) int {
	if s.get(idx) >= rank {
		return Unchanged
	}
	bit := idx * 6
	w := uint16(s.dense[bit/8]) | uint16(s.dense[bit/8+1])<<8
	w = w&^(63<<(bit%8)) | uint16(rank)<<(bit%8)
	s.dense[bit/8], s.dense[bit/8+1] = byte(w), byte(w>>8)
	s.est = 0
	return denseChunkOf(idx)
}

// toSparse turns the exact form into registers: from here on the count is an estimate.
// Its pieces stay within sparseChunkMax: the exact form's are within exactChunkMax+1.
func (s *Sketch) toSparse() {
	hs := s.exact
	s.form, s.exact, s.sparse = formSparse, nil, make([]uint32, 0, 2*len(hs))
	for _, h := range hs {
		s.setSparse(register(h, sparsePrecision))
	}
}

// toDense turns the sparse form into every register.
func (s *Sketch) toDense() {
	sp := s.sparse
	s.form, s.sparse, s.dense, s.est = formDense, nil, make([]byte, denseBytes+1), 0
	for _, e := range sp {
		s.setDense(denseOf(e>>6, uint8(e&63)))
	}
}

// Merge adds every user of o to s: s becomes their union (o is unchanged). Every piece
// of s is then to be stored again.
func (s *Sketch) Merge(o *Sketch) {
	switch o.form {
	case 0:
		return
	case formExact:
		for _, h := range o.exact {
			s.addHash(h)
		}
		return
	}
	if s.form == 0 || s.form == formExact {
		s.toSparse()
	}
	if o.form == formDense && s.form == formSparse {
		s.toDense()
	}
	for _, e := range o.sparse {
		if s.form == formSparse {
			s.setSparse(e>>6, uint8(e&63))
		} else {
			s.setDense(denseOf(e>>6, uint8(e&63)))
		}
	}
	if o.form == formDense {
		for i := range uint32(registers) {
			s.setDense(i, o.get(i))
		}
	}
}

// Count is how many distinct users s holds, and whether that is exact: it is while
// they are at most ExactMax, and an estimate after — off by about one user in 8 000
// while the sparse form holds them (up to some 3 000 users), with a standard error of
// 0.81 % once dense.
func (s *Sketch) Count() (n uint64, exact bool) {
	switch s.form {
	case 0, formExact:
		return uint64(len(s.exact)), true
	}
	if s.est != 0 {
		return s.est, false
	}
	if s.form == formSparse {
		hist := make([]int, sparseMaxRank+1)
		hist[0] = 1 << sparsePrecision
		for _, e := range s.sparse {
			hist[0]--
			hist[e&63]++
		}
		s.est = estimate(hist)
		return s.est, false
	}
	hist := make([]int, maxRank+1)
	for i := 0; i < denseBytes; i += 3 { // four registers in three bytes
		w := uint32(s.dense[i]) | uint32(s.dense[i+1])<<8 | uint32(s.dense[i+2])<<16
		hist[w&63]++
		hist[w>>6&63]++
		hist[w>>12&63]++
		hist[w>>18]++
	}
	s.est = estimate(hist)
	return s.est, false
}

// Clone is a copy of s that shares nothing with it.
func (s *Sketch) Clone() Sketch {
	return Sketch{form: s.form, exact: slices.Clone(s.exact), sparse: slices.Clone(s.sparse), dense: slices.Clone(s.dense), est: s.est}
}

// Size is the bytes s holds in RAM beyond the Sketch itself.
func (s *Sketch) Size() int { return 8*cap(s.exact) + 4*cap(s.sparse) + cap(s.dense) }

// Equal reports whether s and o hold the same registers or users.
func (s *Sketch) Equal(o *Sketch) bool {
	if s.form == 0 || o.form == 0 {
		return len(s.exact)+len(s.sparse)+len(s.dense) == 0 && len(o.exact)+len(o.sparse)+len(o.dense) == 0
	}
	return s.form == o.form && slices.Equal(s.exact, o.exact) && slices.Equal(s.sparse, o.sparse) && slices.Equal(s.dense, o.dense)
}
