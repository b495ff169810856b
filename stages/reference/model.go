package reference

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/sketch"
)

// Made is where and when a relation was made, and whom it notified (0: nobody).
type Made struct {
	Place uint64
	TS    int64
	Owner uint64
}

// Item is one entry of a list: the other side and the time of the relation.
type Item struct {
	ID uint64
	TS int64
}

// Model is the reference. The zero value is not usable: call New.
type Model struct {
	fams pipeline.Families
	last uint64 // the place of the last event applied

	likes    relations          // user → post
	comments map[[3]uint64]Made // (user, post, comment)
	follows  relations          // follower → followed

	counts map[string]map[uint64][]uint64 // family → id → counters

	// viewers are the distinct users who viewed each post, as a set and as the sketch
	// Tally keeps (store/sketch): a post's viewers count is what the sketch of its set
	// counts, which is the set's size up to sketch.ExactMax.
	viewers  map[uint64]map[uint64]bool
	sketches map[uint64]*sketch.Sketch

	notes    map[uint64]map[string]map[uint64]bool // user → kind → places of live notifications
	read     map[uint64]map[string]uint64          // user → kind → place of the last read
	notices  []uint64                              // places of system notices
	sysRead  map[uint64]uint64                     // user → place of the last system read
	posted   map[uint64][]uint64                   // author → places of their posts
	feedRead map[uint64]uint64

	// Applied counts the events applied per type (see Events); Invalid those a producer stored that
	// Tally must dead-letter.
	Applied map[string]int
	Invalid int
}

// New returns an empty model of the default families.
func New() *Model { return NewOf(pipeline.DefaultFamilies()) }

// NewOf returns an empty model of fams: the defaults, with post's viewers if counted,
// and others that incr events count.
func NewOf(fams pipeline.Families) *Model {
	return &Model{
		fams:  fams,
		likes: newRelations(), comments: map[[3]uint64]Made{}, follows: newRelations(),
		counts:  map[string]map[uint64][]uint64{},
		viewers: map[uint64]map[uint64]bool{}, sketches: map[uint64]*sketch.Sketch{},
		notes: map[uint64]map[string]map[uint64]bool{}, read: map[uint64]map[string]uint64{},
		sysRead: map[uint64]uint64{}, posted: map[uint64][]uint64{}, feedRead: map[uint64]uint64{},
		Applied: map[string]int{},
	}
}

// Apply applies one valid event placed at e.Seq (after every event applied so far), made
// at e.TS.
func (m *Model) Apply(e pipeline.Event) error {
	if e.Seq <= m.last {
		return fmt.Errorf("event at place %d applied after place %d", e.Seq, m.last)
	}
	m.last = e.Seq
	m.Applied[e.Type]++
	uid, post, target := uint64(e.UID), uint64(e.Post), uint64(e.Target)
	made := Made{Place: e.Seq, TS: max(e.TS, 0), Owner: uint64(e.Owner)}
	switch e.Type {
	case pipeline.TypeLike:
		relate(m, m.likes, [2]uint64{uid, post}, made, "like", uid, func(n int64) { m.Add("post", post, "like", n) })
	case pipeline.TypeUnlike:
		unrelate(m, m.likes, [2]uint64{uid, post}, "like", func(n int64) { m.Add("post", post, "like", n) })
	case pipeline.TypeComment:
		k := [3]uint64{uid, post, uint64(e.Comment)}
		relate(m, commentSet(m.comments), k, made, "comment", uid, func(n int64) { m.Add("post", post, "comment", n) })
	case pipeline.TypeUncomment:
		k := [3]uint64{uid, post, uint64(e.Comment)}
		unrelate(m, commentSet(m.comments), k, "comment", func(n int64) { m.Add("post", post, "comment", n) })
	case pipeline.TypeFollow, pipeline.TypeUnfollow:
		count := func(n int64) {
			m.Add("user", uid, "following", n)
			m.Add("user", target, "follower", n)
		}
		made.Owner = 0
		if e.Type == pipeline.TypeFollow {
			relate(m, m.follows, [2]uint64{uid, target}, made, "", uid, count)
		} else {
			unrelate(m, m.follows, [2]uint64{uid, target}, "", count)
		}
	case pipeline.TypeRepost:
		m.Add("post", post, "repost", 1)
		m.Add("user", uid, "post", 1)
	case pipeline.TypePost:
		m.Add("user", uid, "post", 1)
		m.posted[uid] = append(m.posted[uid], e.Seq)
	case pipeline.TypeView:
		m.Add("post", post, "view", max(e.N, 1))
		if uid != 0 {
			return m.view(post, uid)
		}
	case pipeline.TypeMention, pipeline.TypeDM:
		if uid != target {
			m.note(target, e.Type, e.Seq, true)
		}
	case pipeline.TypeRead:
		kinds := e.Kinds
		if len(kinds) == 0 {
			kinds = pipeline.UnreadKinds()
		}
		for _, k := range kinds {
			switch k = strings.ToLower(k); k {
			case "feed":
				m.feedRead[uid] = e.Seq
			case "system":
				m.sysRead[uid] = e.Seq
			default:
				if m.read[uid] == nil {
					m.read[uid] = map[string]uint64{}
				}
				m.read[uid][k] = e.Seq
			}
		}
	case pipeline.TypeSystem:
		m.notices = append(m.notices, e.Seq)
	case pipeline.TypeIncr:
		m.Add(e.Family, uint64(e.ID), e.Field, e.N)
	default:
		return fmt.Errorf("event type %q is not modelled", e.Type)
	}
	return nil
}

// rels is a set of relations: relations (likes, follows, with their lists) or a map
// (comments).
type rels[K comparable] interface {
	get(K) (Made, bool)
	set(K, Made)
	del(K)
}

// relate makes relation k at made unless it is made already: count(+1), and a
// notification of kind (none when kind is "") for its owner unless that is actor.
func relate[K comparable](m *Model, rs rels[K], k K, made Made, kind string, actor uint64, count func(int64)) {
	if _, ok := rs.get(k); ok {
		return
	}
	if kind == "" || made.Owner == actor {
		made.Owner = 0
	}
	rs.set(k, made)
	count(1)
	if made.Owner != 0 {
		m.note(made.Owner, kind, made.Place, true)
	}
}

// unrelate undoes relation k if it is made: count(-1), and its notification taken back.
func unrelate[K comparable](m *Model, rs rels[K], k K, kind string, count func(int64)) {
	made, ok := rs.get(k)
	if !ok {
		return
	}
	rs.del(k)
	count(-1)
	if made.Owner != 0 {
		m.note(made.Owner, kind, made.Place, false)
	}
}

// relations are relations of a subject with an object, indexed both ways for lists.
type relations struct{ bySubject, byObject map[uint64]map[uint64]Made }

func newRelations() relations {
	return relations{bySubject: map[uint64]map[uint64]Made{}, byObject: map[uint64]map[uint64]Made{}}
}

func (r relations) get(k [2]uint64) (Made, bool) { m, ok := r.bySubject[k[0]][k[1]]; return m, ok }

func (r relations) set(k [2]uint64, m Made) {
	put := func(idx map[uint64]map[uint64]Made, a, b uint64) {
		if idx[a] == nil {
			idx[a] = map[uint64]Made{}
		}
		idx[a][b] = m
	}
	put(r.bySubject, k[0], k[1])
	put(r.byObject, k[1], k[0])
}

func (r relations) del(k [2]uint64) {
	delete(r.bySubject[k[0]], k[1])
	delete(r.byObject[k[1]], k[0])
}

// list is a subject's objects (or an object's subjects), newest first, then by id.
func list(idx map[uint64]map[uint64]Made, id uint64) []Item {
	var out []Item
	for other, made := range idx[id] {
		out = append(out, Item{ID: other, TS: made.TS})
	}
	slices.SortFunc(out, func(a, b Item) int { return cmp.Or(cmp.Compare(b.TS, a.TS), cmp.Compare(a.ID, b.ID)) })
	return out
}

type commentSet map[[3]uint64]Made

func (c commentSet) get(k [3]uint64) (Made, bool) { m, ok := c[k]; return m, ok }
func (c commentSet) set(k [3]uint64, m Made)      { c[k] = m }
func (c commentSet) del(k [3]uint64)              { delete(c, k) }

func (m *Model) note(u uint64, kind string, place uint64, on bool) {
	if m.notes[u] == nil {
		m.notes[u] = map[string]map[uint64]bool{}
	}
	if m.notes[u][kind] == nil {
		m.notes[u][kind] = map[uint64]bool{}
	}
	if on {
		m.notes[u][kind][place] = true
	} else {
		delete(m.notes[u][kind], place)
	}
}

// Add adds n to a counter, which never goes below zero: each add is applied on its own
// (-5 then +5 on a counter at 2 ends at 5).
func (m *Model) Add(family string, id uint64, field string, n int64) {
	f, err := m.fams.Lookup(family)
	if err != nil {
		return
	}
	i, err := f.Field(field)
	if err != nil {
		return
	}
	if m.counts[family] == nil {
		m.counts[family] = map[uint64][]uint64{}
	}
	c := m.counts[family][id]
	if c == nil {
		c = make([]uint64, len(f.Fields))
		m.counts[family][id] = c
	}
	c[i] = uint64(max(int64(c[i])+n, 0))
}

// view counts uid among post's viewers. The sketch's exact bound is the protocol's.
func (m *Model) view(post, uid uint64) error {
	if sketch.ExactMax != pipeline.ExactViewers {
		return fmt.Errorf("store/sketch is exact up to %d viewers, the protocol says %d", sketch.ExactMax, pipeline.ExactViewers)
	}
	return m.viewed(post, uid)
}

// viewed counts uid among post's viewers.
func (m *Model) viewed(post, uid uint64) error {
	if m.viewers[post] == nil {
		m.viewers[post], m.sketches[post] = map[uint64]bool{}, &sketch.Sketch{}
	}
	m.viewers[post][uid] = true
	m.sketches[post].Add(uid)
	n, exact := m.sketches[post].Count()
	if distinct := len(m.viewers[post]); distinct <= sketch.ExactMax && (!exact || n != uint64(distinct)) {
		return fmt.Errorf("post %d: the sketch of its %d viewers counts %d (exact %v)", post, distinct, n, exact)
	}
	f, _ := m.fams.Lookup(pipeline.FamilyPost)
	if i, err := f.Field(pipeline.FieldViewers); err == nil {
		m.Add(pipeline.FamilyPost, post, pipeline.FieldViewers, int64(n)-int64(m.Counts(pipeline.FamilyPost, post)[i]))
	}
	return nil
}

// Viewers is how many distinct users viewed post: exactly, where Counts gives what
// Tally's sketch counts.
func (m *Model) Viewers(post uint64) int { return len(m.viewers[post]) }

// Counts returns the counters of id in family (zeros for an id never counted), in the
// family's field order.
func (m *Model) Counts(family string, id uint64) []uint64 {
	if c := m.counts[family][id]; c != nil {
		return slices.Clone(c)
	}
	f, _ := m.fams.Lookup(family)
	return make([]uint64, len(f.Fields))
}

// Liked reports whether user u likes post.
func (m *Model) Liked(u, post uint64) bool {
	_, ok := m.likes.get([2]uint64{u, post})
	return ok
}

// LikedPosts returns the posts user u likes, in no order.
func (m *Model) LikedPosts(u uint64) []uint64 { return sortedKeys(m.likes.bySubject[u]) }

// Likes returns the likes of user u; Likers the likers of post; Following whom u
// follows; Followers who follows u: newest first, then by id.
func (m *Model) Likes(u uint64) []Item     { return list(m.likes.bySubject, u) }
func (m *Model) Likers(post uint64) []Item { return list(m.likes.byObject, post) }
func (m *Model) Following(u uint64) []Item { return list(m.follows.bySubject, u) }
func (m *Model) Followers(u uint64) []Item { return list(m.follows.byObject, u) }

// Unread returns user u's unread counts.
func (m *Model) Unread(u uint64) pipeline.Unread {
	count := func(kind string) uint64 {
		var n uint64
		for place := range m.notes[u][kind] {
			if place > m.read[u][kind] {
				n++
			}
		}
		return n
	}
	w := pipeline.Unread{Comment: count("comment"), Mention: count("mention"), Like: count("like"), DM: count("dm")}
	for _, place := range m.notices {
		if place > m.sysRead[u] {
			w.System++
		}
	}
	for author, made := range m.follows.bySubject[u] {
		for _, place := range m.posted[author] {
			if place > max(made.Place, m.feedRead[u]) {
				w.Feed++
			}
		}
	}
	return w
}

func sortedKeys[V any](set map[uint64]V) []uint64 {
	out := make([]uint64, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Events is the number of events applied.
func (m *Model) Events() int {
	n := 0
	for _, k := range m.Applied {
		n += k
	}
	return n
}
