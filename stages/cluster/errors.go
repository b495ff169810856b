package cluster

import "errors"

// Sentinel errors; callers match them with errors.Is. Messages that wrap them say what
// exactly was wrong.
var (
	// ErrOwned: another tallyd holds what was asked for. Alone returns it when another
	// process is live on the prefix (a second tallyd started without --join); Take when
	// another process holds the lease; a backup when another owner claimed the partition
	// under a newer lease.
	ErrOwned = errors.New("the partitions are owned by another tallyd")
	// ErrLost: a lease found taken by another process, gone, or not renewed within its
	// TTL. Its owner gives up what the lease stands for at once.
	ErrLost = errors.New("lease lost")
	// ErrStaleBackup: a restore refused, the backup the pointer names being gone or older
	// than the pointer says. Starting from it (or from nothing) would lose what was
	// purged after the backup the pointer records.
	ErrStaleBackup = errors.New("the state backup is missing or older than its pointer says")
	// ErrDamagedBackup: the backup the pointer names cannot be read whole (its object
	// refused by its digest, or its own checksums failing). Only the piece's last owner,
	// whose local state is the backup's or newer, can take it: it then stores a new one
	// at its next backup, changed or not. The pointer records it once a claim has found it
	// (pointer.Damaged), so that other claims refuse at once, without reading it again.
	ErrDamagedBackup = errors.New("the state backup cannot be read")
	// ErrSuperseded: a backup that cannot become current: another owner, under a newer
	// lease, has claimed the partition since this one's lease was checked.
	ErrSuperseded = errors.New("another owner has claimed the partition")
	// ErrBucketConfig: an existing bucket's configuration (the ownership bucket's, or the
	// state bucket's) would break Tally; the message names the field and the value Tally
	// needs.
	ErrBucketConfig = errors.New("bucket configuration")
)
