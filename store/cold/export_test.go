package cold

import "github.com/dgraph-io/badger/v4"

// Tables are d's tables, for tests that look at how they were written.
func Tables(d *DB) []badger.TableInfo { return d.db.Tables() }

// WithLevelZero is o with Badger's NumLevelZeroTables set to n (and its stall to n+10).
func WithLevelZero(o Options, n int) Options {
	o.levelZero = n
	return o
}

// Levels are d's levels of its LSM tree.
func Levels(d *DB) []badger.LevelInfo { return d.db.Levels() }

// Flatten compacts d's LSM tree into one level.
func Flatten(d *DB) error { return d.db.Flatten(2) }

// VerifyChecksum reads every table of d whole and checks each block's checksum.
func VerifyChecksum(d *DB) error { return d.db.VerifyChecksum() }
