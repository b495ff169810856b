package window

import "encoding/binary"

// leafIDs is the ids of a leaf: a lookup decodes half of them on average, and a leaf's
// entry in the index costs 12 bytes, 0.75 an id.
const leafIDs = 16

// leaves hold most ids of a table, sorted, with their bodies, packed in one byte slice:
// an item is the uvarint of an id's distance from the id before it (ids of the same
// day, snowflakes, are close: 2 bytes an id for a million ids in a partition's second
// of ids), its body's length and its body; a dead item's body is marked (isDead). The
// items are cut in leaves of leafIDs, each found through dir and the id before it, and
// decoded from its start.
//
// The leaves are rebuilt whole (Table.rebuild) from themselves and fresh. Between
// rebuilds an id above the last is appended, the last id's body is rewritten in place,
// and any other id whose body changes is marked dead here and kept in fresh: so fresh
// must stay a small share of the ids for the rebuilds' passes to stay cheap.
type leaves struct {
	// heads[i] is where leaf i starts in data (it ends where the next starts) and the
	// id of the item before its first (0 for leaf 0), from which that item's distance
	// counts: the distances run on across leaves, so a rebuild copies runs of items as
	// they are.
	heads []head
	data  []byte
	n     int // ids, the dead ones included
	live  int
	last  uint64 // the last id
	// deadBytes is the bytes of data the dead ids take.
	deadBytes int
	// dir finds a leaf in a step or two where a binary search of heads takes a dozen
	// mispredicted ones: dir[k] is the leaf that holds id lo + k<<shift, over the ids
	// the leaves held when last indexed, about one entry a leaf, 0.25 bytes an id.
	// Snowflakes of a day spread evenly enough for that; where they do not, the search
	// between two entries is a binary search of a few more leaves.
	dir   []uint32
	lo    uint64
	shift uint8
}

// head is a leaf's entry in heads: 12 bytes, the id split in two words where a uint64
// would pad it to 16, and one cache line for the id and the offset a lookup reads.
type head struct{ hi, lo, start uint32 }

func (h head) before() uint64 { return uint64(h.hi)<<32 | uint64(h.lo) }

// at is where find found an id: the offset of its item, of its body and of its end.
type at struct {
	item, body, end int
}

func (l *leaves) bytes() int {
	return cap(l.data) + 12*cap(l.heads) + 4*cap(l.dir)
}

// leaf returns the leaf that holds id if any does: leaf i holds the ids in
// (before[i], before[i+1]], and leaf 0 every id up to before[1] (heads[i].before).
func (l *leaves) leaf(id uint64) int {
	lo, hi := 1, len(l.heads) // before[lo-1] < id <= before[hi]
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
		if l.heads[m].before() < id {
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
	n := len(l.heads)
	l.dir = nil
	if n < 8 {
		return
	}
	l.lo = l.heads[1].before()
	span, want := l.heads[n-1].before()-l.lo, uint64(n)
	l.shift = 0
	for span>>l.shift >= want {
		l.shift++
	}
	l.dir = make([]uint32, span>>l.shift+2)
	leaf := 0
	for k := range len(l.dir) - 1 {
		x := l.lo + uint64(k)<<l.shift
		for leaf+1 < n && l.heads[leaf+1].before() < x {
			leaf++
		}
		l.dir[k] = uint32(leaf)
	}
	l.dir[len(l.dir)-1] = uint32(n - 1)
}

func (l *leaves) end(leaf int) int {
	if leaf+1 < len(l.heads) {
		return int(l.heads[leaf+1].start)
	}
	return len(l.data)
}

// find returns where id is, if it is there and not dead.
func (l *leaves) find(id uint64) (at, bool) {
	if l.n == 0 || id > l.last {
		return at{}, false
	}
	leaf := l.leaf(id)
	p, end := int(l.heads[leaf].start), l.end(leaf)
	cur, data := l.heads[leaf].before(), l.data[:end]
	// item's reading, written out: this loop is most of a lookup.
	for p < end {
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
			if cur > id || l.isDead(p) {
				return at{}, false
			}
			return at{item: item, body: p, end: p + int(n)}, true
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
	return d, p, p + int(n)
}

// body returns the body of the id find found at a.
func (l *leaves) body(a at) []byte { return l.data[a.body:a.end] }

// A dead item's body starts 0x80 0x00, a uvarint no body starts with (AppendUvarint
// writes 0 as one byte), and every body has two bytes at least (a change's header and
// its change): the mark is read from the cache line the lookup reads anyway, and costs
// no bitmap.
func (l *leaves) isDead(body int) bool { return l.data[body] == 0x80 && l.data[body+1] == 0 }

// kill marks the id found at a dead.
func (l *leaves) kill(a at) {
	l.data[a.body], l.data[a.body+1] = 0x80, 0
	l.live--
	l.deadBytes += a.end - a.item
}

// cut counts an item that starts at data[off], beginning a leaf when it is the first
// of one.
func (l *leaves) cut(off int) {
	if l.n%leafIDs == 0 {
		l.newLeaf(off)
	}
	l.n++
	l.live++
}

func (l *leaves) newLeaf(off int) {
	l.heads = append(l.heads, head{hi: uint32(l.last >> 32), lo: uint32(l.last), start: uint32(off)})
	if len(l.heads) >= 2*l.indexed()+16 {
		// Grown by appends (a checkpoint loaded, ids in order): index them, in time
		// that the appends pay for as a slice's growth does.
		l.index()
	}
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
	for leaf, h := range l.heads {
		p, end, cur := int(h.start), l.end(leaf), h.before()
		for p < end {
			d, body, next := l.item(p)
			cur += d
			if !l.isDead(body) {
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
