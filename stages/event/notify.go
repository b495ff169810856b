package event

import (
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/store/cold"
)

// notify counts a notification of kind for owner caused by an event at place seq (0:
// none), and takes back the one placed at moved (0: none) — the same relation's, made
// elsewhere or undone: here when owner is this partition's, else handed to owner's
// partition, through the same channel after the notification it takes back.
func (s *Stage) notify(txn *cold.Txn, w *work, kind string, owner pipeline.ID, seq, moved uint64) error {
	if q := w.c.partitionOf(owner); q != s.cfg.Partition {
		n := pipeline.Event{Type: pipeline.TypeNotify, Target: owner, Field: kind, Seq: seq, ID: pipeline.ID(moved)}
		if s.cfg.Windows { // the unread counter it changes there counts at the minute here
			n.TS = w.ts
		}
		if seq == 0 { // only taken back
			n.Seq, n.ID, n.N = moved, 0, -1
		}
		w.forward(q, &n)
		return nil
	}
	rs, err := w.readers.Get(txn, uint64(owner))
	if err != nil {
		return err
	}
	read, changed := *rs.Read(kind), false
	if moved > read { // counted and recorded, not covered by a read yet
		w.c.add(s.fields.unread[kind], owner, pipeline.OpAdd, -1)
		w.readers.TakeNote(uint64(owner), &rs, kind, moved)
		changed = true
	}
	if seq > read { // else none, or a read placed after it came first
		w.c.add(s.fields.unread[kind], owner, pipeline.OpAdd, 1)
		w.readers.AddNote(uint64(owner), &rs, kind, seq)
		changed = true
	}
	if changed {
		w.readers.Put(uint64(owner), rs)
	}
	return nil
}
