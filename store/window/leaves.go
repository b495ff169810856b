package window

import "encoding/binary"

// leafIDs is the ids of a leaf: a lookup decodes half of them on average, and a leaf's
// entry in the index costs 12 bytes, 0.75 an id.
const leafIDs = 16

// leaves hold most ids of a table, sorted, with their bodies, packed in one byte slice:
// an item is the uvarint of an id's distance from the id before it (ids of the same
// day, snowflakes, are close: 2 bytes an id for a million ids in a partition's second
// of ids), its body's length and its body. The items are cut in leaves of leafIDs, each
// found by binary search of the id before it, and decoded from its start.
//
// The leaves are rebuilt whole (Table.rebuild) from themselves and fresh. Between
// rebuilds an id above the last is appended, the last id's body is rewritten in place,
// and any other id whose body changes is marked dead here and kept in fresh: so fresh
// must stay a small share of the ids for the rebuilds' passes to stay cheap.
type leaves struct {
	// before[i] is the id of the item before leaf i's first (0 for leaf 0), from which
	// that item's distance counts: the distances run on across leaves, so a rebuild
	// copies runs of items as they are.
	before []uint64
	start  []uint32 // the offset in data of each leaf; a leaf ends where the next starts
	data   []byte
	dead   []uint64 // a bit per id, by its place in the leaves: moved to fresh, or empty
	n      int      // ids, the dead ones included
	live   int
	last   uint64 // the id at place n-1
	// deadBytes is the bytes of data the dead ids take.
	deadBytes int
	// dir finds a leaf in a step or two where a binary search of before takes a dozen
	// mispredicted ones: dir[k] is the leaf that holds id lo + k<<shift, over the ids
	// the leaves held when last rebuilt (index), one entry for two leaves, 0.125 bytes
	// an id. Snowflakes of a day spread evenly enough for that; where they do not, the
	// search between two entries is a binary search of a few more leaves.
	dir   []uint32
	lo    uint64
	shift uint8
}

// at is where find found an id: its place, the offset of its item, of its body and of
// its end.
type at struct {
	place, item, body, end int
}

func (l *leaves) bytes() int {
	return cap(l.data) + 8*cap(l.before) + 4*cap(l.start) + 8*cap(l.dead)
}

// leaf returns the leaf that holds id if any does: leaf i holds the ids in
// (before[i], before[i+1]], and leaf 0 every id up to before[1].
func (l *leaves) leaf(id uint64) int {
	lo, hi := 1, len(l.before) // before[lo-1] < id <= before[hi]
	if len(l.dir) > 0 {
		// The last entry is the last leaf when dir was made, which may have grown
		// leaves after it since: only the entries before it bound hi.
		switch k := (id - l.lo) >> l.shift; {
		case id <= l.lo:
			return 0
		case k < uint64(len(l.dir)-2):
			lo, hi = int(l.dir[k])+1, int(l.dir[k+1])+1
		case k < uint64(len(l.dir)):
			lo = int(l.dir[k]) + 1
		default:
			lo = int(l.dir[len(l.dir)-1]) + 1
		}
	}
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l.before[m] < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// indexed is the leaves dir was made for.
func (l *leaves) indexed() int {
	if len(l.dir) == 0 {
		return 0
	}
	return int(l.dir[len(l.dir)-1]) + 1
}

// index makes dir for the leaves as they are.
func (l *leaves) index() {
	n := len(l.before)
	l.dir = nil
	if n < 8 {
		return
	}
	l.lo = l.before[1]
	span, want := l.before[n-1]-l.lo, uint64(n/2)
	l.shift = 0
	for span>>l.shift >= want {
		l.shift++
	}
	l.dir = make([]uint32, span>>l.shift+2)
	leaf := 0
	for k := range len(l.dir) - 1 {
		x := l.lo + uint64(k)<<l.shift
		for leaf+1 < n && l.before[leaf+1] < x {
			leaf++
		}
		l.dir[k] = uint32(leaf)
	}
	l.dir[len(l.dir)-1] = uint32(n - 1)
}

func (l *leaves) end(leaf int) int {
	if leaf+1 < len(l.start) {
		return int(l.start[leaf+1])
	}
	return len(l.data)
}

// find returns where id is, if it is there and not dead.
func (l *leaves) find(id uint64) (at, bool) {
	if l.n == 0 || id > l.last {
		return at{}, false
	}
	leaf := l.leaf(id)
	p, end := int(l.start[leaf]), l.end(leaf)
	cur, data := l.before[leaf], l.data[:end]
	// item's reading, written out: this loop is most of a lookup.
	for place := leaf * leafIDs; p < end; place++ {
		item := p
		var d uint64
		if b := data[p]; b < 0x80 {
			d = uint64(b)
			p++
		} else if c := data[p+1]; c < 0x80 {
			d = uint64(b&0x7f) | uint64(c)<<7
			p += 2
		} else {
			var k int
			d, k = binary.Uvarint(data[p:])
			p += k
		}
		n := uint64(data[p])
		if n < 0x80 {
			p++
		} else {
			var k int
			n, k = uvarint2(data[p:])
			p += k
		}
		if cur += d; cur >= id {
			if cur > id || l.isDead(place) {
				return at{}, false
			}
			return at{place: place, item: item, body: p, end: p + int(n)}, true
		}
		p += int(n)
	}
	return at{}, false
}

// item reads the item at data[p]: its distance from the id before, where its body
// starts and where it ends. The one-byte cases, most distances and lengths, are read
// here, where the compiler does not call a function for them.
func (l *leaves) item(p int) (d uint64, body, end int) {
	data := l.data
	if d = uint64(data[p]); d < 0x80 {
		p++
	} else {
		var k int
		d, k = uvarint2(data[p:])
		p += k
	}
	n := uint64(data[p])
	if n < 0x80 {
		p++
	} else {
		var k int
		n, k = uvarint2(data[p:])
		p += k
	}
	return d, p, p + int(n)
}

// body returns the body of the id find found at a.
func (l *leaves) body(a at) []byte { return l.data[a.body:a.end] }

func (l *leaves) isDead(place int) bool { return l.dead[place/64]&(1<<(place%64)) != 0 }

// kill marks the id found at a dead.
func (l *leaves) kill(a at) {
	l.dead[a.place/64] |= 1 << (a.place % 64)
	l.live--
	l.deadBytes += a.end - a.item
}

// cut counts an item that starts at data[off], beginning a leaf when it is the first
// of one.
func (l *leaves) cut(off int) {
	if l.n%leafIDs == 0 {
		l.before = append(l.before, l.last)
		l.start = append(l.start, uint32(off))
		if len(l.before) >= 2*l.indexed()+16 {
			// Grown by appends (a checkpoint loaded, ids in order): index them, in
			// time that the appends pay for as a slice's growth does.
			l.index()
		}
	}
	if l.n%64 == 0 {
		l.dead = append(l.dead, 0)
	}
	l.n++
	l.live++
}

// push appends id, which is above every id of the leaves, with body.
func (l *leaves) push(id uint64, body []byte) {
	l.cut(len(l.data))
	l.data = binary.AppendUvarint(l.data, id-l.last)
	l.data = append(binary.AppendUvarint(l.data, uint64(len(body))), body...)
	l.last = id
}

// pushItem is push of a body as an item holds it: its length, then the body.
func (l *leaves) pushItem(id uint64, item []byte) {
	l.cut(len(l.data))
	l.data = append(binary.AppendUvarint(l.data, id-l.last), item...)
	l.last = id
}

// rewrite sets the body of the last id, found at a, in place.
func (l *leaves) rewrite(a at, body []byte) {
	size := a.body - uvarintLen(a.end-a.body)
	l.data = append(binary.AppendUvarint(l.data[:size], uint64(len(body))), body...)
}

// each calls fn with every live id and its body, in id order.
func (l *leaves) each(fn func(id uint64, body []byte)) {
	for leaf, cur := range l.before {
		p, end := int(l.start[leaf]), l.end(leaf)
		for place := leaf * leafIDs; p < end; place++ {
			d, body, next := l.item(p)
			cur += d
			if !l.isDead(place) {
				fn(cur, l.data[body:next])
			}
			p = next
		}
	}
}

func uvarint2(b []byte) (uint64, int) {
	if len(b) > 1 && b[1] < 0x80 {
		return uint64(b[0]&0x7f) | uint64(b[1])<<7, 2
	}
	return binary.Uvarint(b)
}

// uvarint is binary.Uvarint with the one-byte case first.
func uvarint(b []byte) (uint64, int) {
	if b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	return uvarint2(b)
}
