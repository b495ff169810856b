package cold

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/dgraph-io/badger/v4"
	"github.com/vmihailenco/msgpack/v5"
)

// Unread state that is not a counter: what a reader has seen, the posts authors made
// (for feed unread), and each partition's count of system notices.
const (
	nsReader = 'u' // u|uid → ReaderState
	nsPost   = 't' // t|author|ts|post → 1 if pushed to followers, 0 if pulled
	nsPulled = 'q' // q|author: the author has posts that followers pull
	nsSystem = 'y' // y|partition → notices counted in that partition
)

// ReaderState is what a user has seen: the system notice count at their last read of
// system notices and the time (ms) of their last feed read.
type ReaderState struct {
	SysSeen  uint64 `msgpack:"s,omitempty"`
	FeedRead int64  `msgpack:"f,omitempty"`
}

func readerKey(uid uint64) key { return newKey(nsReader, 9).u64(uid) }

// GetReader returns uid's reader state (zero if none).
func GetReader(txn *badger.Txn, uid uint64) (ReaderState, error) {
	var st ReaderState
	item, err := txn.Get(readerKey(uid))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return st, nil
	} else if err != nil {
		return st, err
	}
	err = item.Value(func(v []byte) error { return msgpack.Unmarshal(v, &st) })
	if err != nil {
		return st, fmt.Errorf("%w: reader %d: %w", ErrCorrupt, uid, err)
	}
	return st, nil
}

// PutReader stores uid's reader state.
func PutReader(txn *badger.Txn, uid uint64, st ReaderState) error {
	v, err := msgpack.Marshal(&st)
	if err != nil {
		return err
	}
	return txn.Set(readerKey(uid), v)
}

// PutPost records that author posted at ts, and whether it was pushed to the followers'
// feed counters (otherwise followers pull it when they ask).
func PutPost(txn *badger.Txn, author uint64, ts int64, post uint64, pushed bool) error {
	v := []byte{0}
	if pushed {
		v[0] = 1
	} else if err := txn.Set(newKey(nsPulled, 9).u64(author), nil); err != nil {
		return err
	}
	return txn.Set(newKey(nsPost, 25).u64(author).u64(uint64(max(ts, 0))).u64(post), v)
}

// CountPosts counts author's posts made after ts that were pushed (pushed) or pulled
// (!pushed), up to limit.
func CountPosts(txn *badger.Txn, author uint64, after int64, pushed bool, limit uint64) (uint64, error) {
	prefix := newKey(nsPost, 9).u64(author)
	start := append(append(key{}, prefix...), 0, 0, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint64(start[9:], uint64(max(after, 0))+1)
	if after == math.MaxInt64 {
		return 0, nil
	}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: false})
	defer it.Close()
	var n uint64
	want := byte(0)
	if pushed {
		want = 1
	}
	for it.Seek(start); it.ValidForPrefix(prefix) && n < limit; it.Next() {
		err := it.Item().Value(func(v []byte) error {
			if len(v) != 1 {
				return fmt.Errorf("%w: post flag of %d bytes", ErrCorrupt, len(v))
			}
			if v[0] == want {
				n++
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

func systemKey(p int) key { return newKey(nsSystem, 3).u16(p) }

// SystemCount returns the number of system notices partition p has counted.
func SystemCount(txn *badger.Txn, p int) (uint64, error) {
	item, err := txn.Get(systemKey(p))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	var n uint64
	err = item.Value(func(v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("%w: system count of %d bytes", ErrCorrupt, len(v))
		}
		n = binary.BigEndian.Uint64(v)
		return nil
	})
	return n, err
}

// PutSystemCount stores partition p's system notice count.
func PutSystemCount(txn *badger.Txn, p int, n uint64) error {
	return txn.Set(systemKey(p), binary.BigEndian.AppendUint64(nil, n))
}

// storedCounts reads the checkpointed counters of one id (all zeros if none). It lags
// the counter worker's RAM by at most one flush.
func storedCounts(txn *badger.Txn, family string, p int, id uint64, dst []uint64) error {
	clear(dst)
	item, err := txn.Get(counterPrefix(family, p).u64(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	return item.Value(func(v []byte) error { return unpackCounts(v, dst) })
}

// Pulled is the set of authors who have posts their followers pull, kept in RAM so a
// reader following thousands of accounts is answered without a lookup per followee. It
// only grows (a pulled post stays pulled), so being shared by the stages that add to it
// and the queries that read it needs no more than a read-write lock.
type Pulled struct {
	mu sync.RWMutex
	m  map[uint64]struct{}
}

// LoadPulled reads the set from the database.
func LoadPulled(db *DB) (*Pulled, error) {
	p := &Pulled{m: map[uint64]struct{}{}}
	err := db.db.View(func(txn *badger.Txn) error {
		prefix := key{nsPulled}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			if k := it.Item().Key(); len(k) == 9 {
				p.m[u64at(k, 1)] = struct{}{}
			}
		}
		return nil
	})
	return p, err
}

// Add records that author has pulled posts.
func (p *Pulled) Add(author uint64) {
	p.mu.Lock()
	p.m[author] = struct{}{}
	p.mu.Unlock()
}

// Has reports whether author has pulled posts.
func (p *Pulled) Has(author uint64) bool {
	p.mu.RLock()
	_, ok := p.m[author]
	p.mu.RUnlock()
	return ok
}
