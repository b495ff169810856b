// Package window keeps, per id, the net change of each counter by minute over the last
// day, packed: the windowed counts of one counter partition (stages/counter owns one
// Table per partition, touched by its goroutine only).
//
// Most ids live in leaves: one byte slice of the ids in order, each as its distance
// from the one before (snowflakes of a day are close), then its changes, minutes
// counted from the floor of the last Prune and the field folded into the minute's
// byte — about 6 bytes an id with one change, where an id and a slot of a hash table
// would take 16 to 24 before its changes. Ids the leaves cannot take in place (an
// older id's changes, rewritten) wait in fresh, a small hash table of whole ids, until
// the leaves are rebuilt with them; the share fresh may take bounds what it costs in
// RAM, and the rebuilds' passes in time. Everything is pointer-free, so the GC never
// scans it. The form a record has in Badger (AppendRecord) is not the form in RAM: it
// stays what it was. The package knows nothing of time: callers give the minutes (Unix
// minutes) and the floor below which changes are forgotten.
package window
