package counter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/hop"
	"github.com/tally-dev/tally/store/checkpoint"
	"github.com/tally-dev/tally/store/delivery"
)

// Change events go through an outbox: a checkpoint writes them to Badger in its own
// transaction and they are published after the commit, under ids fixed when it is
// written (pipeline.ChangeMsgID: the checkpoint's position, the previous checkpoint's,
// this run's owner number and the checkpoint's), so a crash in between leaves them to be
// sent at the next start — by this process or by whichever restores the partition's
// backup — instead of never announcing those ids; and no other owner's checkpoint, at
// the same position or not, shares an id with them.
//
// A mirror takes the last value per id, so the stream must get each id's values in
// checkpoint order. The ids of one checkpoint are disjoint across its parts, which may
// be stored in any order; a checkpoint's events are sent only once every earlier one is
// stored, so a publish that fails and is retried can never land after a newer value,
// and a stored part says its owner's checkpoints before it are announced whole.
//
// What a run leaves in the outbox may be stored already (a kill between the publish and
// the next checkpoint, which deletes what was stored): the next run asks the stream
// before it sends any of it, and drops what its last change event says is stored, never
// counting on JetStream's duplicate window to drop it. Sent again, an older checkpoint
// stored after the window would land after a newer one that the window still dropped.

// changeSeq is the outbox Seq of part of checkpoint cp's change events: ordered by
// checkpoint, and the checkpoint is the Seq's top 48 bits.
func changeSeq(cp uint64, part int) uint64 { return cp<<16 | uint64(part) }

// maxParts bounds the parts of one checkpoint's change events to what changeSeq holds.
const maxParts = 1 << 16

// changes is a worker's outbox of change events.
type changes struct {
	out *hop.Outbox
	// pending are written and not yet sent, one group per checkpoint, oldest first.
	pending [][]delivery.OutboxEntry
	// published are stored in the stream, to be deleted by the next checkpoint.
	published []uint64
	// unsure: pending holds what an earlier run left, which the stream may hold already
	// (dropAnnounced has not yet asked it).
	unsure bool
}

// loadChanges takes the change events left in the outbox by the last run.
func (w *Worker) loadChanges() error {
	var pub hop.Publisher = w.js
	if w.cfg.Publisher != nil {
		pub = w.cfg.Publisher
	}
	w.chg = changes{out: hop.NewOutbox(pub, hop.OutboxOptions{
		MaxInflight: 64,
		Retries:     &w.stats.ChangeErrs,
		Log:         w.log,
		Permanent: func(e delivery.OutboxEntry, err error) []delivery.OutboxEntry {
			// No stream for tally.chg.>, or larger than the server takes: sending it
			// again cannot help, and holding it would hold every later change.
			w.stats.ChangeErrs.Add(1)
			w.log.Error("change event dropped: it can never be stored", "msg_id", e.MsgID, "bytes", len(e.Data), "err", err)
			return nil
		},
	})}
	left, err := checkpoint.LoadChanges(w.db, w.cfg.Family.Name, w.cfg.Partition)
	if err != nil {
		return err
	}
	for len(left) > 0 {
		n := 1
		for n < len(left) && left[n].Seq>>16 == left[0].Seq>>16 {
			n++
		}
		w.chg.pending = append(w.chg.pending, left[:n:n])
		left = left[n:]
	}
	if len(w.chg.pending) > 0 {
		w.chg.unsure = true
		w.log.Debug("change events of earlier checkpoints to send again", "checkpoints", len(w.chg.pending))
	}
	return nil
}

// changeEntries makes the change events announcing entries, the ids checkpoint cp
// writes at the worker's position.
func (w *Worker) changeEntries(cp uint64, entries []checkpoint.Entry) ([]delivery.OutboxEntry, error) {
	size := max(w.cfg.MaxChange, (len(entries)+maxParts-1)/maxParts)
	var out []delivery.OutboxEntry
	for part := 0; len(entries) > 0; part++ {
		n := min(len(entries), size)
		ch := pipeline.Change{Fields: w.cfg.Family.Fields, IDs: make([]pipeline.ID, n), Counts: make([][]uint64, n)}
		for i, e := range entries[:n] {
			ch.IDs[i], ch.Counts[i] = pipeline.ID(e.ID), e.Counts
		}
		entries = entries[n:]
		data, err := pipeline.Marshal(&ch, false)
		if err != nil {
			return nil, err
		}
		out = append(out, delivery.OutboxEntry{
			Seq:     changeSeq(cp, part),
			Subject: w.cfg.Subjects.Change(w.cfg.Family.Name, w.cfg.Partition),
			MsgID:   pipeline.ChangeMsgID(w.cfg.Family.Name, w.cfg.Partition, w.cp.Pos, w.lastPos, w.owner, cp, part),
			Data:    data,
		})
	}
	return out, nil
}

// sendChanges collects acknowledgements and, once nothing is in flight, sends the
// oldest checkpoint's change events. It never waits for NATS: change events are for
// mirrors and push gateways, and must not hold up counting or queries. It fails when
// ctx ends, or when it cannot yet ask the stream what of the last run's outbox is
// stored: what is not sent then stays in the outbox, for the next call or start.
func (w *Worker) sendChanges(ctx context.Context) error {
	if len(w.chg.pending) == 0 && w.chg.out.Len() == 0 {
		return nil
	}
	if w.cfg.Valid != nil && !w.cfg.Valid() {
		return nil // another process may own the partition: its counts are the true ones
	}
	if w.chg.unsure {
		if err := w.dropAnnounced(ctx); err != nil {
			w.log.Debug("cannot read the last change event: what the last run left waits", "err", err)
			return err // asked again at the next call
		}
		w.chg.unsure = false
	}
	if err := w.chg.out.Reap(ctx, false); err != nil {
		return err
	}
	for w.chg.out.Len() == 0 && len(w.chg.pending) > 0 {
		next := w.chg.pending[0]
		w.chg.pending = w.chg.pending[1:]
		w.log.Debug("change events sent", "msg_id", next[0].MsgID, "parts", len(next))
		if err := w.chg.out.Send(ctx, next); err != nil {
			return err
		}
	}
	return nil
}

// drainChanges sends what is pending, for at most wait, and deletes from the outbox
// what was stored: a clean stop leaves nothing to send again at the next start, unless
// NATS did not answer in time, or the partition may be another's by now (its lease
// lapsed meanwhile: sendChanges then sends nothing, and nothing is left in flight to
// wait for).
func (w *Worker) drainChanges(ctx context.Context, wait time.Duration) error {
	if w.cfg.Valid == nil || w.cfg.Valid() {
		dctx, cancel := context.WithTimeout(ctx, wait)
		for {
			if err := w.chg.out.Reap(dctx, true); err != nil || len(w.chg.pending) == 0 || dctx.Err() != nil {
				break
			}
			if w.cfg.Valid != nil && !w.cfg.Valid() {
				break
			}
			if err := w.sendChanges(dctx); err != nil {
				break
			}
		}
		cancel()
	}
	w.chg.published = append(w.chg.published, w.chg.out.Published()...)
	if err := checkpoint.DeleteChanges(w.db, w.cfg.Family.Name, w.cfg.Partition, w.chg.published); err != nil {
		return err
	}
	w.chg.published = nil
	return nil
}

// trimStandby drops, while another process owns the partition (a standby's worker, or
// one that lost its lease), the change events of its checkpoints that the owner has
// announced already (dropAnnounced). What is left is sent if this process takes the
// partition over, and the outbox stays as small as the owner's lead. It asks NATS at
// most once a second.
func (w *Worker) trimStandby(ctx context.Context) {
	if len(w.chg.pending) == 0 || time.Since(w.trimmed) < time.Second {
		return
	}
	w.trimmed = time.Now()
	if err := w.dropAnnounced(ctx); err != nil {
		w.log.Debug("cannot read the owner's last change event", "err", err)
	}
}

// dropAnnounced drops the pending checkpoints whose changes the stream holds already,
// as its last change event of the partition says: the checkpoints its owner numbered
// below it (stored whole: its owner sent each only once those before were), and those
// of any owner taken at a position below the checkpoint before it — every id changed
// in the stream before that position was announced with a value at least as new. (Not
// the stored part's own checkpoint: its owner may have died before its other parts
// were stored, and a checkpoint in the middle of a release shares its position with the
// next.) They are deleted from the outbox by the next checkpoint.
func (w *Worker) dropAnnounced(ctx context.Context) error {
	last, noStream, err := w.lastChange(ctx)
	if err != nil {
		return err
	}
	upTo, _ := pipeline.ChangePrev(last) // 0 for an older version's, which does not say
	owner, top, named := pipeline.ChangeCheckpoint(last)
	if noStream { // it would refuse them: nothing is left to send
		upTo = math.MaxUint64
	}
	n := 0
	for ; n < len(w.chg.pending); n++ {
		id := w.chg.pending[n][0].MsgID
		pos, ok := pipeline.ChangePos(id)
		o, cp, ok2 := pipeline.ChangeCheckpoint(id)
		if stored := ok && pos < upTo || named && ok2 && o == owner && cp < top; !stored {
			break
		}
		for _, e := range w.chg.pending[n] {
			w.chg.published = append(w.chg.published, e.Seq)
		}
	}
	if n > 0 {
		w.log.Debug("change events stored already, not sent again", "checkpoints", n, "last", last)
	}
	w.chg.pending = w.chg.pending[n:]
	return nil
}

// lastChange is the message id of the last change event of the partition stored in the
// changes stream ("" when there is none), or noStream when there is no such stream.
func (w *Worker) lastChange(ctx context.Context) (id string, noStream bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := w.js.Stream(ctx, w.cfg.Subjects.ChangesStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return "", true, nil
	}
	if err != nil {
		return "", false, err
	}
	m, err := st.GetLastMsgForSubject(ctx, w.cfg.Subjects.Change(w.cfg.Family.Name, w.cfg.Partition))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	id = m.Header.Get(jetstream.MsgIDHeader)
	if _, ok := pipeline.ChangePos(id); !ok {
		return "", false, fmt.Errorf("change event %d has no change message id", m.Sequence)
	}
	return id, false, nil
}
