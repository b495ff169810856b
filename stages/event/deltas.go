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

type counterKey struct {
	id    uint64
	field uint8
}

// coalescer merges the deltas of one transaction per counter (+1 +1 +1 → +3) where that
// is exact whatever the counter holds (pipeline.Delta.Then), keeps the others apart in
// their order (+3 then -1), and groups them by destination partition.
type coalescer struct {
	partitions int
	byDest     map[dest]*destDeltas
	order      []dest // first-touched order, so output is deterministic
}

type destDeltas struct {
	index  map[counterKey]int // the last delta of each counter
	deltas []pipeline.Delta
}

func newCoalescer(partitions int) *coalescer {
	return &coalescer{partitions: partitions, byDest: map[dest]*destDeltas{}}
}

func (c *coalescer) add(f fieldRef, id pipeline.ID, op pipeline.Op, n int64) {
	d := dest{f.family, pipeline.PartitionOf(id, c.partitions)}
	dd := c.byDest[d]
	if dd == nil {
		dd = &destDeltas{index: map[counterKey]int{}}
		c.byDest[d] = dd
		c.order = append(c.order, d)
	}
	x := pipeline.Delta{ID: uint64(id), Field: f.field, Op: op, N: n}
	k := counterKey{uint64(id), f.field}
	if i, ok := dd.index[k]; ok {
		if m, ok := dd.deltas[i].Then(x); ok {
			dd.deltas[i] = m
			return
		}
	}
	dd.index[k] = len(dd.deltas)
	dd.deltas = append(dd.deltas, x)
}

func (c *coalescer) reset() {
	clear(c.byDest)
	c.order = c.order[:0]
}
