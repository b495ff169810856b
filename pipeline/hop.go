package pipeline

// TypeHop is the subject token of events one event partition hands to another
// (<prefix>.ev.hop.<key>): relation events of a batch that belong to the other
// partition, and copies of a system notice. It is not an event type; producers have no
// reason to publish it (deploy/ denies them).
const TypeHop = "hop"

// HopBatch is the payload of a TypeHop message: the events event partition Source hands
// to one other partition in one transaction. Seq counts Source's batches to that
// partition 1, 2, 3, … without gaps, so the receiving partition applies them in order
// and exactly once however late one is sent again (see stages/hop).
type HopBatch struct {
	Source uint32  `json:"src"`
	Seq    uint64  `json:"seq"`
	Events []Event `json:"events"`
}

// DecodeHopBatch decodes a TypeHop payload; the events are validated again, since
// whoever may publish on the events subjects could have sent it.
func DecodeHopBatch(data []byte, fams Families) (*HopBatch, error) {
	d := EventDecoder{Families: fams}
	return d.DecodeHop(data)
}
