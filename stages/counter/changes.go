package counter

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/backoff"
	"github.com/tally-dev/tally/stages/flow"
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
// checkpoint order. They go one at a time, in checkpoint order, each expecting the
// subject's last change event to be the one stored before it (the stream sequence of
// its acknowledgement): a publish that fails and is retried can never land after a
// newer value, and an owner that lost the partition — paused past its lease while
// another took over and announced newer values — is fenced at its next change event
// however long that one was held on the way (a paused client's buffer, a stalled
// connection, a retry), rather than storing an older value after the new owner's
// (TestPausedOwnersLateChangeEventFenced). A checkpoint's parts follow each other at a
// round trip each: Run sends the next as soon as one is acknowledged.
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
	pub        hop.Publisher
	ackTimeout time.Duration
	// pending are written and not yet stored, one group per checkpoint, oldest first;
	// the first sent parts of pending[0] are stored.
	pending [][]delivery.OutboxEntry
	sent    int
	// The publish of pending[0][sent] in flight (fut nil: none), its outcome's
	// channels (Run selects on them) and when it was sent. (fut, not the channels, says
	// whether one is in flight: a future may give nil channels, never settling.)
	fut    jetstream.PubAckFuture
	ok     <-chan *jetstream.PubAck
	failed <-chan error
	at     time.Time
	// last is the stream sequence of the subject's last change event as this worker
	// knows it, which the next publish expects (known false: to be looked up first,
	// lookUp).
	last  uint64
	known bool
	// asking is the answer to come of a lookup of the subject's last change event under
	// way off the worker's goroutine (nil: none; Run selects on it): a JetStream request,
	// which NATS may leave unanswered for its whole timeout (a server of the cluster
	// gone), and the worker answers the partition's queries meanwhile. forSend says the
	// answer also tells the next publish what to expect, and fenced that a publish was
	// refused for not following the last one.
	asking          chan lookup
	forSend, fenced bool
	// After a transient failure, the next publish waits until retry.
	wait  *backoff.Backoff
	retry time.Time
	// published are stored in the stream, to be deleted by the next checkpoint.
	published []uint64
	log       hop.FailureLog
}

// loadChanges takes the change events left in the outbox by the last run.
func (w *Worker) loadChanges() error {
	var pub hop.Publisher = w.js
	if w.cfg.Publisher != nil {
		pub = w.cfg.Publisher
	}
	w.chg = changes{pub: pub, ackTimeout: hop.AckTimeout(pub), wait: backoff.New(50*time.Millisecond, 2*time.Second)}
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
		w.log.Debug("change events of earlier checkpoints to send again", "checkpoints", len(w.chg.pending))
	}
	return nil
}

// changeEntries makes the change events announcing entries, the ids checkpoint cp
// writes at the worker's position.
func (w *Worker) changeEntries(cp uint64, entries []checkpoint.Entry) []delivery.OutboxEntry {
	size := max(w.cfg.MaxChange, (len(entries)+maxParts-1)/maxParts)
	var out []delivery.OutboxEntry
	for part := 0; len(entries) > 0; part++ {
		n := min(len(entries), size)
		ch := pipeline.Change{Fields: w.cfg.Family.Fields, IDs: make([]pipeline.ID, n), Counts: make([][]uint64, n)}
		for i, e := range entries[:n] {
			ch.IDs[i], ch.Counts[i] = pipeline.ID(e.ID), e.Counts
		}
		entries = entries[n:]
		out = append(out, delivery.OutboxEntry{
			Seq:     changeSeq(cp, part),
			Subject: w.cfg.Subjects.Change(w.cfg.Family.Name, w.cfg.Partition),
			MsgID:   pipeline.ChangeMsgID(w.cfg.Family.Name, w.cfg.Partition, w.cp.Pos, w.lastPos, w.owner, cp, part),
			Data:    pipeline.AppendChange(make([]byte, 0, ch.Size()), &ch),
		})
	}
	return out
}

// sendChanges takes the outcome of the change event in flight, if it has come, and
// sends the next one if there is one and none is in flight. It never waits for NATS:
// change events are for mirrors and push gateways, and must not hold up counting or
// queries; what NATS must be asked first (the subject's last change event) is asked
// beside the worker (lookUp), and what is not sent stays in the outbox, for the next
// call or start.
func (w *Worker) sendChanges(ctx context.Context) {
	c := &w.chg
	for {
		if c.fut != nil {
			select {
			case ack := <-c.ok:
				w.changeSettled(ctx, ack, nil)
			case err := <-c.failed:
				w.changeSettled(ctx, nil, err)
			default:
				if time.Since(c.at) < c.ackTimeout {
					return
				}
				w.changeSettled(ctx, nil, errNoAck)
			}
			continue
		}
		if len(c.pending) == 0 || time.Now().Before(c.retry) {
			return
		}
		if w.cfg.Valid != nil && !w.cfg.Valid() {
			return // another process may own the partition: its counts are the true ones
		}
		if !c.known {
			// Asked before the first publish, and after a fence: what the last run left
			// may be stored already, and another owner may have published since. The
			// answer comes to Run (lookedUp), which calls again.
			w.lookUp(ctx, true)
			return
		}
		e := &c.pending[0][c.sent]
		msg := &nats.Msg{Subject: e.Subject, Data: e.Data, Header: nats.Header{jetstream.MsgIDHeader: []string{e.MsgID}}}
		fut, err := c.pub.PublishMsgAsync(msg, jetstream.WithExpectLastSequencePerSubject(c.last))
		if err != nil {
			w.changeSettled(ctx, nil, err)
			continue
		}
		c.fut, c.ok, c.failed, c.at = fut, fut.Ok(), fut.Err(), time.Now()
	}
}

// changeSettled takes the outcome of the change event in flight: stored (ack), or
// failed with err.
func (w *Worker) changeSettled(ctx context.Context, ack *jetstream.PubAck, err error) {
	c := &w.chg
	c.fut, c.ok, c.failed = nil, nil, nil
	e := c.pending[0][c.sent]
	switch {
	case err == nil:
		c.stored(ack.Sequence)
		return
	case flow.Fenced(err):
		// Not the subject's last as expected: this very event, stored by a try whose
		// acknowledgement was lost (NATS checks the last sequence before the message
		// id), or another's — an owner that took the partition over, or one before
		// this worker first asked. The last one is looked up (lookedUp tells which),
		// and the next publish waits for it.
		c.known, c.fenced = false, true
		w.lookUp(ctx, true)
		return
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		// A stream electing its leader, or no stream for tally.chg.> at all: the lookup
		// of the last change event tells which, off this goroutine (lookedUp drops what
		// is pending when there is no stream), and the next publish waits for it.
		// hop.PermanentFailure would ask here, for up to 2 s, while reads wait.
		c.known = false
		w.lookUp(ctx, true)
	case hop.PermanentFailure(ctx, c.pub, e.Subject, err):
		// No stream for tally.chg.>, or larger than the server takes: sending it
		// again cannot help, and holding it would hold every later change.
		w.stats.ChangeErrs.Add(1)
		w.log.Error("change event dropped: it can never be stored", "msg_id", e.MsgID, "bytes", len(e.Data), "err", err)
		c.stored(0)
		return
	}
	w.stats.ChangeErrs.Add(1)
	c.retry = time.Now().Add(c.wait.Next())
	c.log.Failed(w.log, "change event publish failed, will retry", err)
}

// stored retires the change event in flight, stored at stream sequence seq (0: dropped,
// the subject's last unchanged).
func (c *changes) stored(seq uint64) {
	if seq != 0 {
		c.last = seq
	}
	c.published = append(c.published, c.pending[0][c.sent].Seq)
	c.wait.Reset()
	if c.sent++; c.sent == len(c.pending[0]) {
		c.pending, c.sent = c.pending[1:], 0
	}
}

// drainChanges sends what is pending, for at most wait, and deletes from the outbox
// what was stored: a clean stop leaves nothing to send again at the next start, unless
// NATS did not answer in time, or the partition may be another's by now (its lease
// lapsed meanwhile: sendChanges then sends nothing).
func (w *Worker) drainChanges(ctx context.Context, wait time.Duration) error {
	dctx, cancel := context.WithTimeout(ctx, wait)
	c := &w.chg
	for (len(c.pending) > 0 || c.fut != nil) && dctx.Err() == nil && (w.cfg.Valid == nil || w.cfg.Valid()) {
		w.sendChanges(dctx)
		var retry <-chan time.Time
		if c.fut == nil && len(c.pending) > 0 && c.asking == nil {
			retry = time.After(time.Until(c.retry))
		}
		select {
		case ack := <-c.ok:
			w.changeSettled(dctx, ack, nil)
		case err := <-c.failed:
			w.changeSettled(dctx, nil, err)
		case l := <-c.asking:
			w.lookedUp(l)
		case <-retry:
		case <-dctx.Done():
		}
	}
	cancel()
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
	w.lookUp(ctx, false)
}

// dropAnnounced drops the pending checkpoints whose changes the stream holds already,
// as its last change event of the partition says: the checkpoints its owner numbered
// below it (stored whole: its owner sent each only once those before were), and those
// of any owner taken at a position below the checkpoint before it — every id changed
// in the stream before that position was announced with a value at least as new. (Not
// the stored part's own checkpoint: its owner may have died before its other parts
// were stored, and a checkpoint in the middle of a release shares its position with the
// next.) They are deleted from the outbox by the next checkpoint. It returns the last
// change event's stream sequence.
func (w *Worker) dropAnnounced(l lookup) uint64 {
	c := &w.chg
	last, seq := l.id, l.seq
	upTo, _ := pipeline.ChangePrev(last) // 0 for an older version's, which does not say
	owner, top, named := pipeline.ChangeCheckpoint(last)
	if l.noStream { // it would refuse them: nothing is left to send
		upTo = math.MaxUint64
		if len(c.pending) > 0 {
			w.stats.ChangeErrs.Add(1)
			w.log.Error("change events dropped: no stream takes them", "stream", w.cfg.Subjects.ChangesStream(), "checkpoints", len(c.pending))
		}
	}
	n := 0
	for ; n < len(c.pending); n++ {
		id := c.pending[n][0].MsgID
		pos, ok := pipeline.ChangePos(id)
		o, cp, ok2 := pipeline.ChangeCheckpoint(id)
		if stored := ok && pos < upTo || named && ok2 && o == owner && cp < top; !stored {
			break
		}
		for _, e := range c.pending[n] {
			c.published = append(c.published, e.Seq)
		}
	}
	if n > 0 {
		w.log.Debug("change events stored already, not sent again", "checkpoints", n, "last", last)
		// A publish still in flight, of a worker that lost its lease, is of the first
		// of them: its outcome no longer matters.
		c.pending, c.sent = c.pending[n:], 0
		c.fut, c.ok, c.failed = nil, nil, nil
	}
	if c.fut == nil && len(c.pending) > 0 && c.pending[0][c.sent].MsgID == last {
		c.stored(seq) // stored by a try whose outcome this worker did not see
	}
	return seq
}

// lookup is what lastChange answered; err when it could not tell.
type lookup struct {
	id       string
	seq      uint64
	noStream bool
	err      error
}

// lookUp begins a lookup of the subject's last change event off the worker's
// goroutine, unless one is under way; forSend, the answer also sets what the next
// publish expects. The answer comes to Run, which hands it to lookedUp.
func (w *Worker) lookUp(ctx context.Context, forSend bool) {
	c := &w.chg
	c.forSend = c.forSend || forSend
	if c.asking != nil {
		return
	}
	ch := make(chan lookup, 1)
	c.asking = ch
	w.lookups.Go(func() { ch <- w.lastChange(ctx) })
}

// lookedUp takes the answer of a lookup begun by lookUp: the pending checkpoints whose
// changes the stream holds are dropped (dropAnnounced), and, when asked for a send,
// the next publish expects the last one — after a fence, once its pause is over.
func (w *Worker) lookedUp(l lookup) {
	c := &w.chg
	c.asking = nil
	forSend, fenced := c.forSend, c.fenced
	c.forSend, c.fenced = false, false
	if l.err != nil {
		c.retry = time.Now().Add(c.wait.Next())
		w.log.Debug("cannot read the last change event: what is pending waits", "err", l.err)
		return
	}
	var mine string // the event in flight when fenced
	if fenced && c.fut == nil && len(c.pending) > 0 {
		mine = c.pending[0][c.sent].MsgID
	}
	seq := w.dropAnnounced(l)
	if !forSend {
		return
	}
	c.last, c.known = seq, true
	if !fenced || l.id == mine {
		return // fenced by this very event, stored by a try whose outcome was lost
	}
	// Another's: the next publish, which only an owner sends, after a pause, not in a
	// loop against a writer that keeps going.
	c.retry = time.Now().Add(c.wait.Next())
	if w.cfg.Valid == nil || w.cfg.Valid() {
		w.log.Debug("the last change event is not this worker's; going on after it", "msg_id", l.id, "seq", l.seq)
	} else {
		w.stats.ChangeErrs.Add(1)
		w.stats.ChangesFenced.Add(1)
		w.log.Info("change events fenced: the partition's lease lapsed and another owner announced since", "msg_id", mine, "last", l.id)
	}
}

// lastChange looks up the message id and stream sequence of the last change event of
// the partition stored in the changes stream ("" and 0 when there is none), or that
// there is no such stream (noStream).
func (w *Worker) lastChange(ctx context.Context) lookup {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := w.js.Stream(ctx, w.cfg.Subjects.ChangesStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return lookup{noStream: true}
	}
	if err != nil {
		return lookup{err: err}
	}
	m, err := st.GetLastMsgForSubject(ctx, w.cfg.Subjects.Change(w.cfg.Family.Name, w.cfg.Partition))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return lookup{}
	}
	if err != nil {
		return lookup{err: err}
	}
	return lookup{id: m.Header.Get(jetstream.MsgIDHeader), seq: m.Sequence}
}
