// Package keys builds the store's keys: a namespace byte, then big-endian fields, so
// that keys sort as their fields do and a prefix is a range. It names every namespace
// and builds the keys that more than one store package uses: store/graph,
// store/checkpoint, store/stagelog and store/unread write them, and store/cold backs
// them up, restores and clears them (cold.Keys) without importing those packages.
// Each namespace byte differs from every other.
package keys

import "encoding/binary"

// Key is a key being built.
type Key []byte

// New starts a key of namespace ns with room for capacity bytes.
func New(ns byte, capacity int) Key { return append(make(Key, 0, capacity), ns) }

// U8 and the others append a field.
func (k Key) U8(v byte) Key      { return append(k, v) }
func (k Key) U16(v int) Key      { return binary.BigEndian.AppendUint16(k, uint16(v)) }
func (k Key) U32(v uint32) Key   { return binary.BigEndian.AppendUint32(k, v) }
func (k Key) U64(v uint64) Key   { return binary.BigEndian.AppendUint64(k, v) }
func (k Key) Str(s string) Key   { return append(append(k, byte(len(s))), s...) }
func (k Key) Bytes(b []byte) Key { return append(k, b...) }

// U32At and U64At read a field at off.
func U32At(b []byte, off int) uint32 { return binary.BigEndian.Uint32(b[off:]) }
func U64At(b []byte, off int) uint64 { return binary.BigEndian.Uint64(b[off:]) }

// Relations and likes (store/graph): every key is partition p's under ns|p.
const (
	NSRelation  = 'R' // R|partition|kind|a|b|c → relation state
	NSBySubject = 'S' // S|partition|kind|a|^time|b|c: what a liked or follows
	NSByObject  = 'O' // O|partition|kind|b|^time|a|c: who follows b
	NSLikes     = 'L' // L|partition|'r'|user → like record
	NSLikers    = 'K' // K|partition|'l'|post|^second|batch → liker chunk
)

// Graph are the namespaces of relations and likes.
func Graph() []byte { return []byte{NSRelation, NSBySubject, NSByObject, NSLikes, NSLikers} }

// An event stage's state and outbox (store/stagelog), and a counter partition's
// counters, checkpoint and journal (store/checkpoint).
const (
	NSStage   = 'p' // p|partition → stage state; p|partition|'h'|src|seq → held hop batch
	NSOutbox  = 'x' // x|partition|seq → outbox entry; also w|…|'x'|seq, a change outbox entry
	NSCounter = 'c' // c|family|partition|id → counters
	NSMeta    = 'w' // w|family|partition → checkpoint; w|…|'h'|src|seq → held delta batch
	NSJournal = 'j' // j|family|partition|checkpoint → the checkpoint's entries, packed
	NSHeld    = 'h' // the byte after a stage's or a checkpoint's key that holds held batches
	NSLayout  = 'Y' // Y|name: the layout a database is in, and the layout changes it went through
)

// Stage is the key of event-stage partition p's state: the mark of what it reflects.
func Stage(p int) Key { return New(NSStage, 3).U16(p) }

// Outbox is the prefix of event-stage partition p's outbox.
func Outbox(p int) Key { return New(NSOutbox, 3).U16(p) }

// Counters is the prefix of the counters of (family, p).
func Counters(family string, p int) Key { return New(NSCounter, 4+len(family)).Str(family).U16(p) }

// Meta is the key of the checkpoint of (family, p): the mark of what its counters
// reflect, and the prefix of its change outbox and held batches.
func Meta(family string, p int) Key { return New(NSMeta, 4+len(family)).Str(family).U16(p) }

// Journal is the prefix of the journal of (family, p).
func Journal(family string, p int) Key { return New(NSJournal, 12+len(family)).Str(family).U16(p) }

// Unread state that is not a counter (store/unread). Everything is keyed by the events'
// places in the events stream (pipeline.Event.Seq), never by time, so that what a read
// covers, what a follow sees and what an unfollow takes back do not depend on the order
// in which partitions apply what they hand each other.
const (
	NSReader   = 'V' // V|partition|uid → reader state
	NSNotified = 'N' // N|partition|uid|kind|seq: a notification counted, until a read covers it
	NSPosts    = 'E' // E|partition|author|seq|post → 1 if pushed to followers, 0 if pulled
	NSPulled   = 'Q' // Q|partition|author: the author has posts that followers pull
	NSPulledAt = 'P' // P|partition|author|seq: a pulled post that partition has applied
	NSArrived  = 'h' // h|partition|author|seq: a pushed post that partition has applied
	NSFollowed = 'g' // g|partition|author|uid → seq of uid's follow of author (uid in partition)
	NSNotice   = 'z' // z|partition|seq: a system notice counted in that partition
	NSAuthor   = 'k' // k|partition|author → author state
	NSFeedRead = 'b' // b|partition|seq|uid: uid's last feed read, by place
)

// Unread are the unread namespaces, every key of which is partition p's under ns|p.
func Unread() []byte {
	return []byte{NSReader, NSNotified, NSPosts, NSPulled, NSPulledAt, NSArrived, NSFollowed, NSNotice, NSAuthor, NSFeedRead}
}

// NSViewers holds the distinct viewers of posts (store/viewers):
// U|partition|post|piece → a piece of the post's sketch (store/sketch). Like the unread
// namespaces, every key of it is partition p's under ns|p.
const NSViewers = 'U'
