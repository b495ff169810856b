package delivery

// Mark is what a partition has received from one source of a hop (stages/hop): every
// batch sequence up to Through is applied, and the batches in Held arrived above a gap
// and wait, unapplied, for it to fill (a publish retried after later ones succeeded).
type Mark struct {
	Through uint64 `msgpack:"t"`
	// Above is decoded from checkpoints of older versions, which applied batches above a
	// gap at once: these are applied.
	Above []uint64 `msgpack:"a,omitempty"`
	// Held is ascending by Seq, every Seq above Through.
	Held []Held `msgpack:"h,omitempty"`
}

// Held is a batch received above a gap, kept until the gap fills. Its payload is stored
// under its own key (hop.HeldStore): Data is only decoded from marks of older versions,
// which kept it here, and moved out when they are loaded.
type Held struct {
	Seq  uint64 `msgpack:"s"`
	Size uint32 `msgpack:"n,omitempty"` // the payload's bytes; 0: none (a number filled empty)
	Data []byte `msgpack:"d,omitempty"`
}

// HeldRef names a held batch: its source partition and its sequence from that source.
type HeldRef struct {
	Src uint32
	Seq uint64
}

// OutboxEntry is one message to publish after the transaction that wrote it commits.
type OutboxEntry struct {
	Seq     uint64 `msgpack:"q,omitempty"` // also the entry's key in Badger
	Subject string `msgpack:"s"`
	MsgID   string `msgpack:"i"`
	Data    []byte `msgpack:"d"`
}

// Size is at least the bytes e takes encoded: its strings and data, and 40 for the
// map, its keys and the lengths.
func (e *OutboxEntry) Size() int { return len(e.Subject) + len(e.MsgID) + len(e.Data) + 40 }
