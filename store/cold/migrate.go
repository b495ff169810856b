package cold

import (
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// The layout before every event-stage key carried its partition: relations, readers,
// notifications and posts were keyed by id alone, and the processes that shared a
// database read each other's. Migrate moves them under their partitions.
const (
	nsRelationV0  = 'r' // r|kind|a|b|c
	nsBySubjectV0 = 's' // s|kind|a|^time|b|c
	nsByObjectV0  = 'o' // o|kind|b|^time|a|c
	nsReadSeqV0   = 'v' // v|uid
	nsNotifiedV0  = 'n' // n|uid|kind|seq
	nsPostsV0     = 'e' // e|author|seq|post → pushed
	nsPulledV0    = 'q' // q|author
	nsReaderV1    = 'u' // written before places were used; nothing reads them
	nsPostV1      = 't'
	nsSystemV1    = 'y'
)

// Migrate moves the keys of the old layout to the partitions that own them now, with
// partitions partitions and partOf the partition of an id: a relation and its subject's
// list go to the subject's partition, a follow's follower list to the followed user's, a
// reader's state and notifications to the reader's, a post to its author's. A pulled post
// is recorded in every partition (see PutPulled). It returns how many keys it moved; a
// database in the new layout moves none, after one look per old namespace. It is
// idempotent: a crash halfway leaves old keys that the next call moves again.
func Migrate(db *DB, partitions int, partOf func(id uint64) int) (int, error) {
	moved := 0
	for _, ns := range []byte{nsRelationV0, nsBySubjectV0, nsByObjectV0, nsReadSeqV0, nsNotifiedV0, nsPostsV0, nsPulledV0, nsReaderV1, nsPostV1, nsSystemV1} {
		n, err := db.migrate(ns, func(k, v []byte, set func(key, []byte) error) error {
			return moveKey(k, v, partitions, partOf, set)
		})
		moved += n
		if err != nil {
			return moved, fmt.Errorf("cannot move the keys of namespace %q to their partitions: %w", ns, err)
		}
	}
	return moved, nil
}

// moveKey writes through set the new keys of one old key (none for what nothing reads).
func moveKey(k, v []byte, partitions int, partOf func(uint64) int, set func(key, []byte) error) error {
	bad := fmt.Errorf("%w: old key %x", ErrCorrupt, k)
	rest := k[1:]
	switch k[0] {
	case nsRelationV0, nsBySubjectV0, nsByObjectV0:
		if (k[0] == nsRelationV0 && len(k) != 26) || (k[0] != nsRelationV0 && len(k) != 34) {
			return bad
		}
		ns := map[byte]byte{nsRelationV0: nsRelation, nsBySubjectV0: nsBySubject, nsByObjectV0: nsByObject}[k[0]]
		owner := u64at(k, 2) // the subject, first
		if k[0] == nsByObjectV0 && Kind(k[1]) != Follow {
			owner = u64at(k, 18) // a like's likers stay with the likers
		}
		return set(newKey(ns, len(k)+2).u16(partOf(owner)).u8(k[1]).bytes(k[2:]), v)
	case nsReadSeqV0, nsNotifiedV0:
		if len(rest) < 8 {
			return bad
		}
		ns := map[byte]byte{nsReadSeqV0: nsReadSeq, nsNotifiedV0: nsNotified}[k[0]]
		return set(newKey(ns, len(k)+2).u16(partOf(u64at(k, 1))).bytes(rest), v)
	case nsPostsV0:
		if len(k) != 25 || len(v) != 1 {
			return bad
		}
		author := u64at(k, 1)
		if err := set(newKey(nsPosts, 27).u16(partOf(author)).bytes(rest), v); err != nil {
			return err
		}
		if v[0] == 0 { // pulled: every partition's readers count it
			for q := range partitions {
				if err := set(newKey(nsPulled, 11).u16(q).u64(author), nil); err != nil {
					return err
				}
				if err := set(pulledPrefix(q, author).u64(u64at(k, 9)), nil); err != nil {
					return err
				}
			}
		}
	}
	return nil // pulled sets are made again from the posts; the oldest keys go
}

// migrate rewrites every key under the namespace byte ns through move and deletes it.
func (d *DB) migrate(ns byte, move func(k, v []byte, set func(key, []byte) error) error) (int, error) {
	wb := d.db.NewWriteBatch()
	defer wb.Cancel()
	n := 0
	err := d.db.View(func(txn *badger.Txn) error {
		prefix := []byte{ns}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			k := it.Item().KeyCopy(nil)
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := move(k, v, func(nk key, nv []byte) error { return wb.Set(nk, nv) }); err != nil {
				return err
			}
			if err := wb.Delete(k); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	return n, wb.Flush()
}
