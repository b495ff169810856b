package event

import (
	"fmt"
	"slices"

	"github.com/tally-dev/tally/pipeline"
)

// fieldRef names one counter: its family and the field's index.
type fieldRef struct {
	family string
	field  uint8
}

// fields resolves, once, every counter the event types write, so a missing family or
// field in the configuration fails at start, not on the first event.
type fields struct {
	like, repost, comment, view  fieldRef
	follower, following, posts   fieldRef
	unComment, unMention, unLike fieldRef
	unDM, unFeed                 fieldRef
	unread                       map[string]fieldRef
	// viewers is the post family's count of distinct viewers, when the family has that
	// field (counted): views with a uid are then counted in store/viewers' sketches.
	viewers fieldRef
	counted bool
}

func resolveFields(fams pipeline.Families) (*fields, error) {
	var err error
	ref := func(family, field string) fieldRef {
		if err != nil {
			return fieldRef{}
		}
		f, e := fams.Lookup(family)
		if e != nil {
			err = e
			return fieldRef{}
		}
		i, e := f.Field(field)
		if e != nil {
			err = e
		}
		return fieldRef{family: family, field: uint8(i)}
	}
	f := &fields{
		like: ref("post", "like"), repost: ref("post", "repost"),
		comment: ref("post", "comment"), view: ref("post", "view"),
		follower: ref("user", "follower"), following: ref("user", "following"), posts: ref("user", "post"),
		unComment: ref("unread", "comment"), unMention: ref("unread", "mention"),
		unLike: ref("unread", "like"), unDM: ref("unread", "dm"), unFeed: ref("unread", "feed"),
	}
	if err != nil {
		return nil, fmt.Errorf("the event types need families post, user and unread: %w", err)
	}
	f.unread = map[string]fieldRef{"comment": f.unComment, "mention": f.unMention, "like": f.unLike, "dm": f.unDM, "feed": f.unFeed}
	if post, _ := fams.Lookup(pipeline.FamilyPost); slices.Contains(post.Fields, pipeline.FieldViewers) {
		f.viewers, f.counted = ref(pipeline.FamilyPost, pipeline.FieldViewers), true
	}
	return f, nil
}

// dest is one counter partition: where a delta batch goes.
type dest struct {
	family    string
	partition int
}

func (d dest) String() string { return fmt.Sprintf("%s.%d", d.family, d.partition) }

// counterAt is where a transaction's last changes of a counter are: its last delta in
// deltas, and its window change of minute in windowed (-1: none).
type counterAt struct {
	delta, window int32
	minute        uint32
}

// coalescer merges the deltas of one transaction per counter (+1 +1 +1 → +3) where that
// is exact whatever the counter holds (pipeline.Delta.Then), keeps the others apart in
// their order (+3 then -1), and groups them by destination partition. With windows on,
// it also sums the adds per counter and minute of the event that made them (minute, set
// before each event is applied; 0: none) for the windowed counts.
type coalescer struct {
	partitions int
	// byDest keeps every destination a transaction touched, emptied for the next
	// (reset) rather than dropped, so that its maps and slices keep their room.
	byDest map[dest]*destDeltas
	order  []dest // first-touched order, so output is deterministic
	minute uint32
	// discard drops every delta: a standby applying its owner's log record takes the
	// record's outbox, so what its events would send is never looked at.
	discard bool
	// parts remembers the partitions of the ids asked lately (partitionOf).
	parts [512]idPartition
	// families holds, for the first maxFamilies families added to, their destinations
	// by partition as byDest has them (nil: not looked up yet), so that an add finds
	// its destination without hashing the family's name.
	families []familyDests
}

// maxFamilies is the most families a coalescer keeps destinations by partition for:
// a configuration has a few.
const maxFamilies = 8

type familyDests struct {
	family string
	dests  []*destDeltas
}

// idPartition is an id and its partition + 1 (0: none remembered).
type idPartition struct {
	id pipeline.ID
	p  int32
}

// partitionOf is pipeline.PartitionOf(id, c.partitions), remembered for the ids asked
// lately: an event's key is asked where it is applied and again for each delta it
// makes, and a transaction's events come back to the same ids (a popular post's likes
// and views), where an id's decimal form and its hash cost more than the rest of an add.
func (c *coalescer) partitionOf(id pipeline.ID) int {
	s := &c.parts[uint64(id)%uint64(len(c.parts))]
	if s.p == 0 || s.id != id {
		s.id, s.p = id, int32(pipeline.PartitionOf(id, c.partitions))+1
	}
	return int(s.p - 1)
}

// keepDeltas is the most deltas a destination keeps room for after a transaction: a
// backlog's large transactions do not hold their maps' room for ever.
const keepDeltas = 1 << 14

type destDeltas struct {
	used    bool             // touched by this transaction (in order)
	index   index[counterAt] // each counter's (id, field) last delta and window change
	deltas  []pipeline.Delta
	windows index[int32] // each counter and minute's (id, minute<<8 | field) entry in windowed
	// windowed are the window changes in first-touched order; those that net to 0 are
	// dropped when sent (windowDeltas).
	windowed []pipeline.WindowDelta
}

// windowDeltas returns the window changes of dd that change something: dd.windowed
// itself when none nets to 0, as most do (the index points into it: it is not changed).
func (dd *destDeltas) windowDeltas() []pipeline.WindowDelta {
	i := slices.IndexFunc(dd.windowed, func(w pipeline.WindowDelta) bool { return w.N == 0 })
	if i < 0 {
		return dd.windowed
	}
	out := slices.Clone(dd.windowed[:i])
	for _, w := range dd.windowed[i+1:] {
		if w.N != 0 {
			out = append(out, w)
		}
	}
	return out
}

func newCoalescer(partitions int) *coalescer {
	return &coalescer{partitions: partitions, byDest: map[dest]*destDeltas{}}
}

func (c *coalescer) add(f fieldRef, id pipeline.ID, op pipeline.Op, n int64) {
	if c.discard {
		return
	}
	d := dest{f.family, c.partitionOf(id)}
	dd := c.destOf(d)
	if !dd.used {
		dd.used = true
		c.order = append(c.order, d)
	}
	at, ok := dd.index.ref(uint64(id), uint64(f.field))
	if !ok {
		*at = counterAt{delta: -1, window: -1}
	}
	if c.minute != 0 && op == pipeline.OpAdd && n != 0 {
		dd.addWindow(uint64(id), f.field, at, c.minute, n)
	}
	x := pipeline.Delta{ID: uint64(id), Field: f.field, Op: op, N: n}
	if at.delta >= 0 {
		if m, ok := dd.deltas[at.delta].Then(x); ok {
			dd.deltas[at.delta] = m
			return
		}
	}
	at.delta = int32(len(dd.deltas))
	dd.deltas = append(dd.deltas, x)
}

// addWindow adds n to the window change of counter (id, field) in minute, whose entry
// at caches when it is the minute of the counter's last change. A counter changed in
// several minutes has an entry for each, found through windows.
func (dd *destDeltas) addWindow(id uint64, field uint8, at *counterAt, minute uint32, n int64) {
	if at.window >= 0 && at.minute == minute {
		dd.windowed[at.window].N += n
		return
	}
	i, ok := dd.windows.ref(id, uint64(minute)<<8|uint64(field))
	if ok {
		dd.windowed[*i].N += n
	} else {
		*i = int32(len(dd.windowed))
		dd.windowed = append(dd.windowed, pipeline.WindowDelta{ID: id, Field: field, Minute: minute, N: n})
	}
	at.window, at.minute = *i, minute
}

// destOf is destination d's deltas, made on first use.
func (c *coalescer) destOf(d dest) *destDeltas {
	var dests []*destDeltas
	for i := range c.families {
		if c.families[i].family == d.family {
			dests = c.families[i].dests
			break
		}
	}
	if dests == nil && len(c.families) < maxFamilies {
		dests = make([]*destDeltas, c.partitions)
		c.families = append(c.families, familyDests{d.family, dests})
	}
	if dests != nil && dests[d.partition] != nil {
		return dests[d.partition]
	}
	dd := c.byDest[d]
	if dd == nil {
		dd = &destDeltas{}
		c.byDest[d] = dd
	}
	if dests != nil {
		dests[d.partition] = dd
	}
	return dd
}

func (c *coalescer) reset() {
	for _, d := range c.order {
		dd := c.byDest[d]
		if len(dd.deltas) > keepDeltas || len(dd.windowed) > keepDeltas {
			delete(c.byDest, d)
			c.families = c.families[:0] // they may hold dd
			continue
		}
		dd.index.clear()
		dd.windows.clear()
		dd.deltas, dd.windowed, dd.used = dd.deltas[:0], dd.windowed[:0], false
	}
	c.order = c.order[:0]
	c.minute = 0
}

// windowMinute is the minute an event at ts (ms) counts in for the windows, in a
// transaction whose newest message was stored at minute now (0: not known, after a
// restart that applied no message yet), or 0 when it counts in none: an event claiming
// a time after it was stored counts when it was stored, and one a day or more before
// now counts in no window (pipeline.WindowDay) and costs nothing. Both depend on the
// stream alone, never on a clock, so a replay makes the same windows.
func windowMinute(ts int64, now uint32) uint32 {
	m := pipeline.MinuteOf(ts)
	if now == 0 {
		return m
	}
	if m > now {
		return now
	}
	if m+pipeline.WindowDay <= now {
		return 0
	}
	return m
}
