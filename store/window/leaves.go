package window

import "encoding/binary"

// leafIDs is the ids of a leaf, whose head costs 12 bytes, 0.375 an id. Lookups start
// from dir's marks, and from a leaf's head only for ids dir does not cover.
const leafIDs = 32

// markIDs is about the ids between two marks of dir (12 bytes a mark, 0.375 an id): a
// lookup decodes half of them on average.
const markIDs = 32

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
	// dir finds an id with one cache miss before its item's, where a binary search of
	// heads takes a dozen mispredicted steps and the head another miss: dir[k] marks the
	// first item whose id is at least lo + k<<shift (lo the first id when indexed), with
	// the id before it, so a lookup decodes from there. Snowflakes of a day spread
	// evenly enough for that; an id past the marks is found through heads.
	dir     []mark
	lo      uint64
	shift   uint8
	indexed int // n when dir was made
}

// head is a leaf's entry in heads: 12 bytes, the id split in two words where a uint64
// would pad it to 16, and one cache line for the id and the offset a lookup reads.
type head struct{ hi, lo, start uint32 }

func (h head) before() uint64 { return uint64(h.hi)<<32 | uint64(h.lo) }

// mark is an entry of dir: the offset of an item in data and the id before it, in 12
// bytes as a head is.
type mark struct{ hi, lo, at uint32 }

func (m mark) before() uint64 { return uint64(m.hi)<<32 | uint64(m.lo) }

func markOf(before uint64, at int) mark {
	return mark{hi: uint32(before >> 32), lo: uint32(before), at: uint32(at)}
}

// at is where find found an id: the offset of its item, of its body and of its end.
type at struct {
	item, body, end int
}

func (l *leaves) bytes() int {
	return cap(l.data) + 12*cap(l.heads) + 12*cap(l.dir)
}

// leaf returns the leaf that holds id if any does: leaf i holds the ids in
// (before[i], before[i+1]], and leaf 0 every id up to before[1] (heads[i].before).
func (l *leaves) leaf(id uint64) int {
	lo, hi := 1, len(l.heads) // before[lo-1] < id <= before[hi]
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

// index makes dir for the items as they are: a pass over them.
func (l *leaves) index() {
	l.dir, l.indexed = nil, l.n
	if l.n < 2*markIDs {
		return
	}
	first, _, _ := l.item(0)
	l.lo = first
	span, want := l.last-first, uint64(l.n/markIDs)
	l.shift = 0
	for span>>l.shift >= want {
		l.shift++
	}
	l.dir = make([]mark, 0, span>>l.shift+1)
	var id uint64
	for p := 0; p < len(l.data); {
		d, _, next := l.item(p)
		l.extend(id, id+d, p)
		id += d
		p = next
	}
}

// extend adds the marks an item of id at data[at] is the first of, before the id before
// it; an id far past the marks (more than doubling them) is left to heads.
func (l *leaves) extend(before, id uint64, at int) {
	k := (id - l.lo) >> l.shift
	if k >= uint64(2*cap(l.dir)+64) {
		return
	}
	for uint64(len(l.dir)) <= k {
		l.dir = append(l.dir, markOf(before, at))
	}
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
	var p int
	var cur uint64
	switch k := (id - l.lo) >> l.shift; {
	case len(l.dir) == 0:
		leaf := l.leaf(id)
		p, cur = int(l.heads[leaf].start), l.heads[leaf].before()
	case id < l.lo:
		return at{}, false // dir was made with the first id, and none comes before
	case k < uint64(len(l.dir)):
		p, cur = int(l.dir[k].at), l.dir[k].before()
	default:
		leaf := l.leaf(id)
		p, cur = int(l.heads[leaf].start), l.heads[leaf].before()
	}
	// item's reading, written out: this loop is most of a lookup. It ends at id or past
	// it, since id is at most the last.
	data := l.data
	for {
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
}

// push appends id, which is above every id of the leaves, with body.
func (l *leaves) push(id uint64, body []byte) {
	at := len(l.data)
	l.data = binary.AppendUvarint(l.data, id-l.last)
	l.data = append(binary.AppendUvarint(l.data, uint64(len(body))), body...)
	l.pushed(id, at)
}

// pushItem is push of a body as an item holds it: its length, then the body.
func (l *leaves) pushItem(id uint64, item []byte) {
	at := len(l.data)
	l.data = append(binary.AppendUvarint(l.data, id-l.last), item...)
	l.pushed(id, at)
}

// pushed counts the item of id just appended at data[at], and marks it in dir, which
// is made again when the ids have doubled since (a checkpoint loaded in id order):
// the appends pay for that as for a slice's growth.
func (l *leaves) pushed(id uint64, at int) {
	l.cut(at)
	if len(l.dir) > 0 {
		l.extend(l.last, id, at)
	}
	l.last = id
	if l.n >= 2*l.indexed+2*markIDs {
		l.index()
	}
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
