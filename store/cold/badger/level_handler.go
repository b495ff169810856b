/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package badger

import (
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/badger/v4/y"
)

type levelHandler struct {
	// Guards tables, totalSize.
	sync.RWMutex

	// For level >= 1, tables are sorted by key ranges, which do not overlap.
	// For level 0, tables are sorted by time.
	// For level 0, newest table are at the back. Compact the oldest one first, which is at the front.
	tables         []*table.Table
	totalSize      int64
	totalStaleSize int64

	// l0stall is a condition variable used to signal the (single) flush goroutine
	// waiting in addLevel0Table that the L0 table count has dropped below the stall
	// threshold (or that the DB is closing). It is only used for level 0 and its
	// Locker is this handler's write lock (see RWMutex above), so the stall
	// predicate (len(tables) >= NumLevelZeroTablesStall) is always evaluated and
	// the wait is entered atomically under the same lock that compaction uses to
	// remove L0 tables. This eliminates lost wakeups without a second mutex.
	l0stall *sync.Cond

	// The following are initialized once and const.
	level    int
	strLevel string
	db       *DB
	// view is the levels' (levelsController.view): Tally's. A get holds it for
	// reading to list the tables of every level; tables changes only under it too.
	view *sync.RWMutex
}

// setTables makes tables the level's list of tables, under the levels' view lock
// (levelsController.view): Tally's. Every change to s.tables goes through it, and is
// made whole before: a reader holding the view lock for reading sees it as it was or
// as it is. Caller must hold s.Lock().
func (s *levelHandler) setTables(tables []*table.Table) {
	s.view.Lock()
	s.tables = tables
	s.view.Unlock()
}

func (s *levelHandler) isLastLevel() bool {
	return s.level == s.db.opt.MaxLevels-1
}

func (s *levelHandler) getTotalStaleSize() int64 {
	s.RLock()
	defer s.RUnlock()
	return s.totalStaleSize
}

func (s *levelHandler) getTotalSize() int64 {
	s.RLock()
	defer s.RUnlock()
	return s.totalSize
}

// initTables replaces s.tables with given tables. This is done during loading.
func (s *levelHandler) initTables(tables []*table.Table) {
	s.Lock()
	defer s.Unlock()

	s.totalSize = 0
	s.totalStaleSize = 0
	for _, t := range tables {
		s.addSize(t)
	}

	if s.level == 0 {
		// Key range will overlap. Just sort by fileID in ascending order
		// because newer tables are at the end of level 0.
		sort.Slice(tables, func(i, j int) bool {
			return tables[i].ID() < tables[j].ID()
		})
	} else {
		// Sort tables by keys.
		sort.Slice(tables, func(i, j int) bool {
			return y.CompareKeys(tables[i].Smallest(), tables[j].Smallest()) < 0
		})
	}
	s.setTables(tables)
}

// deleteTables remove tables idx0, ..., idx1-1.
func (s *levelHandler) deleteTables(toDel []*table.Table) error {
	s.Lock() // s.Unlock() below

	toDelMap := make(map[uint64]struct{})
	for _, t := range toDel {
		toDelMap[t.ID()] = struct{}{}
	}

	// Make a copy as iterators might be keeping a slice of tables.
	var newTables []*table.Table
	for _, t := range s.tables {
		_, found := toDelMap[t.ID()]
		if !found {
			newTables = append(newTables, t)
			continue
		}
		s.subtractSize(t)
	}
	s.setTables(newTables)

	s.Unlock() // Unlock s _before_ we DecrRef our tables, which can be slow.

	return decrRefs(toDel)
}

// replaceTables will replace tables[left:right] with newTables. Note this EXCLUDES tables[right].
// You must call decr() to delete the old tables _after_ writing the update to the manifest.
func (s *levelHandler) replaceTables(toDel, toAdd []*table.Table) error {
	// Need to re-search the range of tables in this level to be replaced as other goroutines might
	// be changing it as well.  (They can't touch our tables, but if they add/remove other tables,
	// the indices get shifted around.)
	s.Lock() // We s.Unlock() below.

	toDelMap := make(map[uint64]struct{})
	for _, t := range toDel {
		toDelMap[t.ID()] = struct{}{}
	}
	var newTables []*table.Table
	for _, t := range s.tables {
		_, found := toDelMap[t.ID()]
		if !found {
			newTables = append(newTables, t)
			continue
		}
		s.subtractSize(t)
	}

	// Increase totalSize first.
	for _, t := range toAdd {
		s.addSize(t)
		t.IncrRef()
		newTables = append(newTables, t)
	}

	// Assign tables, sorted first.
	sort.Slice(newTables, func(i, j int) bool {
		return y.CompareKeys(newTables[i].Smallest(), newTables[j].Smallest()) < 0
	})
	s.setTables(newTables)
	s.Unlock() // s.Unlock before we DecrRef tables -- that can be slow.
	return decrRefs(toDel)
}

// addTable adds toAdd table to levelHandler. Normally when we add tables to levelHandler, we sort
// tables based on table.Smallest. This is required for correctness of the system. But in case of
// stream writer this can be avoided. We can just add tables to levelHandler's table list
// and after all addTable calls, we can sort table list(check sortTable method).
// NOTE: levelHandler.sortTables() should be called after call addTable calls are done.
func (s *levelHandler) addTable(t *table.Table) {
	s.Lock()
	defer s.Unlock()

	s.addSize(t) // Increase totalSize first.
	t.IncrRef()
	s.setTables(append(s.tables, t))
}

// sortTables sorts tables of levelHandler based on table.Smallest.
// Normally it should be called after all addTable calls.
func (s *levelHandler) sortTables() {
	s.Lock()
	defer s.Unlock()

	tables := slices.Clone(s.tables)
	sort.Slice(tables, func(i, j int) bool {
		return y.CompareKeys(tables[i].Smallest(), tables[j].Smallest()) < 0
	})
	s.setTables(tables)
}

func decrRefs(tables []*table.Table) error {
	for _, table := range tables {
		if err := table.DecrRef(); err != nil {
			return err
		}
	}
	return nil
}

func newLevelHandler(db *DB, level int, view *sync.RWMutex) *levelHandler {
	s := &levelHandler{
		level:    level,
		strLevel: fmt.Sprintf("l%d", level),
		db:       db,
		view:     view,
	}
	if level == 0 {
		// The cond's Locker is the handler's write lock (RWMutex.Lock/Unlock).
		s.l0stall = sync.NewCond(&s.RWMutex)
	}
	return s
}

// signalL0Drained wakes any flush goroutine waiting in addLevel0Table. It must be
// called whenever the number of L0 tables may have decreased (e.g. after an
// L0->Lbase or L0->L0 compaction removes tables) or when the DB is closing. The
// waiter re-checks the stall predicate under the lock in a loop, so it is safe to
// Broadcast without holding the lock and without the count having actually changed
// (spurious broadcasts are harmless).
func (s *levelHandler) signalL0Drained() {
	if s.l0stall != nil {
		s.l0stall.Broadcast()
	}
}

// numTablesLocked returns the number of tables. Caller must hold s.Lock() (write
// lock), which is the same lock used as the l0stall cond's Locker.
func (s *levelHandler) numTablesLocked() int {
	return len(s.tables)
}

// addLevel0TableLocked appends t to L0 unconditionally. Caller must hold s.Lock()
// and must have asserted s.level == 0. This is the lock-held variant of the body
// of tryAddLevel0Table, used by addLevel0Table which already holds the lock to
// wait on the stall cond.
func (s *levelHandler) addLevel0TableLocked(t *table.Table) {
	s.setTables(append(s.tables, t))
	t.IncrRef()
	s.addSize(t)
}

// tryAddLevel0Table returns true if ok and no stalling.
func (s *levelHandler) tryAddLevel0Table(t *table.Table) bool {
	y.AssertTrue(s.level == 0)
	// Need lock as we may be deleting the first table during a level 0 compaction.
	s.Lock()
	defer s.Unlock()
	// Stall (by returning false) if we are above the specified stall setting for L0.
	if len(s.tables) >= s.db.opt.NumLevelZeroTablesStall {
		return false
	}

	s.setTables(append(s.tables, t))
	t.IncrRef()
	s.addSize(t)

	return true
}

// This should be called while holding the lock on the level.
func (s *levelHandler) addSize(t *table.Table) {
	s.totalSize += t.Size()
	s.totalStaleSize += int64(t.StaleDataSize())
}

// This should be called while holding the lock on the level.
func (s *levelHandler) subtractSize(t *table.Table) {
	s.totalSize -= t.Size()
	s.totalStaleSize -= int64(t.StaleDataSize())
}
func (s *levelHandler) numTables() int {
	s.RLock()
	defer s.RUnlock()
	return len(s.tables)
}

func (s *levelHandler) close() error {
	s.RLock()
	defer s.RUnlock()
	var err error
	for _, t := range s.tables {
		if closeErr := t.Close(-1); closeErr != nil && err == nil {
			err = closeErr
		}
	}
	return y.Wrap(err, "levelHandler.close")
}

// tablesForKey appends to tables those of the level that may hold key, with a
// reference to each: the caller drops them (decrRefs). Tally: the caller holds the
// levels' view lock for reading (levelsController.get), which every change to s.tables
// is made under, not the level's own; it appends where getTableForKey returned a slice
// and a closure, allocated for every level of every key looked for; and it tests each
// table's Bloom filter for hash (the key's, without its version) before taking a
// reference, which a table no filter lets through is then spared: a table listed while
// the lock is held is not closed (its last reference goes once it is taken out).
func (s *levelHandler) tablesForKey(tables []*table.Table, key []byte, hash uint32) []*table.Table {
	if s.level == 0 {
		// For level 0, we need to check every table. Remember to make a copy as s.tables may change
		// once we exit this function, and we don't want to lock s.tables while seeking in tables.
		// CAUTION: Reverse the tables.
		for i := len(s.tables) - 1; i >= 0; i-- {
			if s.doesNotHave(s.tables[i], hash) {
				continue
			}
			tables = append(tables, s.tables[i])
			s.tables[i].IncrRef()
		}
		return tables
	}
	// For level >= 1, we can do a binary search as key range does not overlap.
	idx := sort.Search(len(s.tables), func(i int) bool {
		return y.CompareKeys(s.tables[i].Biggest(), key) >= 0
	})
	if idx >= len(s.tables) || s.doesNotHave(s.tables[idx], hash) {
		// Given key is strictly > than every element we have, or not in the table.
		return tables
	}
	s.tables[idx].IncrRef()
	return append(tables, s.tables[idx])
}

// doesNotHave reports whether t's Bloom filter says it does not hold the key of hash.
func (s *levelHandler) doesNotHave(t *table.Table, hash uint32) bool {
	if t.DoesNotHave(hash) {
		y.NumLSMBloomHitsAdd(s.db.opt.MetricsEnabled, s.strLevel, 1)
		return true
	}
	return false
}

// appendIterators appends iterators to an array of iterators, for merging.
// Note: This obtains references for the table handlers. Remember to close these iterators.
func (s *levelHandler) appendIterators(iters []y.Iterator, opt *IteratorOptions) []y.Iterator {
	s.RLock()
	defer s.RUnlock()

	var topt int
	if opt.Reverse {
		topt = table.REVERSED
	}
	if s.level == 0 {
		// Remember to add in reverse order!
		// The newer table at the end of s.tables should be added first as it takes precedence.
		// Level 0 tables are not in key sorted order, so we need to consider them one by one.
		var out []*table.Table
		for _, t := range s.tables {
			if opt.pickTable(t) {
				out = append(out, t)
			}
		}
		return appendIteratorsReversed(iters, out, topt)
	}

	tables := opt.pickTables(s.tables)
	if len(tables) == 0 {
		return iters
	}
	return append(iters, table.NewConcatIterator(tables, topt))
}

type levelHandlerRLocked struct{}

// overlappingTables returns the tables that intersect with key range. Returns a half-interval.
// This function should already have acquired a read lock, and this is so important the caller must
// pass an empty parameter declaring such.
func (s *levelHandler) overlappingTables(_ levelHandlerRLocked, kr keyRange) (int, int) {
	if len(kr.left) == 0 || len(kr.right) == 0 {
		return 0, 0
	}
	left := sort.Search(len(s.tables), func(i int) bool {
		return y.CompareKeys(kr.left, s.tables[i].Biggest()) <= 0
	})
	right := sort.Search(len(s.tables), func(i int) bool {
		return y.CompareKeys(kr.right, s.tables[i].Smallest()) < 0
	})
	return left, right
}
