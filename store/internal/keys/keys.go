// Package keys builds the store's keys: a namespace byte, then big-endian fields, so
// that keys sort as their fields do and a prefix is a range. It also names the
// namespaces that more than one store package uses: store/unread writes them and
// store/cold backs them up, restores and migrates them.
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

// Unread state that is not a counter (store/unread). Everything is keyed by the events'
// places in the events stream (pipeline.Event.Seq), never by time, so that what a read
// covers, what a follow sees and what an unfollow takes back do not depend on the order
// in which partitions apply what they hand each other. Each must differ from every
// namespace of store/cold.
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
