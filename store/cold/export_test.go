package cold

import "github.com/dgraph-io/badger/v4"

// Tables are d's tables, for tests that look at how they were written.
func Tables(d *DB) []badger.TableInfo { return d.db.Tables() }
