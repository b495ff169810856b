package reference

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
)

// Stored reads the whole events stream of sj in order and applies to m every event a
// producer stored whose message id starts with prefix ("" for all), as the event stage
// reads it: a message's events are placed at its stream sequence and their index
// (pipeline.SeqOf), timed by their ts or else the time the stream stored them; invalid
// ones are counted in m.Invalid. Tally's own messages on the events subjects (hop
// batches) are skipped. each, when not nil, is told of every producer message read,
// with how many of its events are valid and invalid. It returns the number of producer
// messages read.
func (m *Model) Stored(ctx context.Context, js jetstream.JetStream, sj pipeline.Subjects, prefix string, each func(msg jetstream.Msg, valid, invalid int)) (int, error) {
	msgs, _, err := m.StoredAfter(ctx, js, sj, prefix, 0, each)
	return msgs, err
}

// StoredAfter is Stored of the messages stored after stream sequence after only: a
// model fed the whole stream in turns (each from the last sequence the turn before
// returned) is the model of Stored. It returns the last sequence read (after when none).
func (m *Model) StoredAfter(ctx context.Context, js jetstream.JetStream, sj pipeline.Subjects, prefix string, after uint64, each func(msg jetstream.Msg, valid, invalid int)) (int, uint64, error) {
	msgs, last := 0, after
	err := ReadStreamAfter(ctx, js, sj.EventsStream(), after, func(msg jetstream.Msg, seq uint64, stored time.Time) error {
		last = seq
		typ, err := sj.StoredType(msg.Subject())
		if err != nil {
			return fmt.Errorf("stored message %d: %w", seq, err)
		}
		id := msg.Headers().Get(jetstream.MsgIDHeader)
		if typ == pipeline.TypeHop || !strings.HasPrefix(id, prefix) {
			return nil
		}
		msgs++
		valid, invalid, err := m.storedMsg(typ, msg, seq, stored)
		if err != nil {
			return fmt.Errorf("stored message %d: %w", seq, err)
		}
		if each != nil {
			each(msg, valid, invalid)
		}
		return nil
	})
	return msgs, last, err
}

// ReadStream hands every message of stream to fn in order, with its stream sequence and
// the time the stream stored it, reading up to the last message stored when it starts.
func ReadStream(ctx context.Context, js jetstream.JetStream, stream string, fn func(msg jetstream.Msg, seq uint64, stored time.Time) error) error {
	return ReadStreamAfter(ctx, js, stream, 0, fn)
}

// ReadStreamAfter is ReadStream of the messages stored after stream sequence after.
func ReadStreamAfter(ctx context.Context, js jetstream.JetStream, stream string, after uint64, fn func(msg jetstream.Msg, seq uint64, stored time.Time) error) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	last := info.State.LastSeq
	if last <= after {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	cons, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return err
	}
	for seq := after; seq < last; {
		// No more than is left: a fetch of more waits its whole MaxWait for them.
		batch, err := cons.Fetch(int(min(1000, last-seq)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return err
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				return err
			}
			seq = md.Sequence.Stream
			if err := fn(msg, seq, md.Timestamp); err != nil {
				return err
			}
		}
		if batch.Error() != nil {
			return batch.Error()
		}
		if n == 0 {
			return fmt.Errorf("stream %s read up to %d of %d", stream, seq, last)
		}
	}
	return nil
}

// storedMsg applies one producer message stored at seq, as the event stage decodes it,
// and returns how many of its events were valid and invalid.
func (m *Model) storedMsg(typ string, msg jetstream.Msg, seq uint64, stored time.Time) (valid, invalid int, err error) {
	batch := typ == pipeline.TypeBatch || typ == pipeline.TypeAdminBatch
	noID := msg.Headers().Get(jetstream.MsgIDHeader) == ""
	evs, bad, err := pipeline.DecodeEvents(typ, msg.Data(), msg.Headers(), m.fams)
	if err == nil && noID && (batch || evs[0].Tx == "") {
		err = fmt.Errorf("no transaction id")
	}
	if err != nil {
		m.Invalid++
		return 0, 1, nil
	}
	m.Invalid += len(bad)
	for i := range evs {
		e := evs[i]
		e.Seq, e.Local = pipeline.SeqOf(seq, i), false
		if e.TS == 0 {
			e.TS = stored.UnixMilli()
		}
		if err := m.Apply(e); err != nil {
			return 0, 0, err
		}
	}
	return len(evs), len(bad), nil
}
