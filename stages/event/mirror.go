package event

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/stages/flow"
)

// Mirror keeps the stage's state a warm copy of its partition's owner's, as a standby
// (Kafka Streams' standby tasks): each record the owner appends to the partition's log
// is applied here, as it comes, to the events it covers, with the record's state and
// outbox, deleting the outbox entries the owner deleted — but nothing is sent and
// nothing appended. A takeover by this process then replays only the records after the
// last one applied here (Run), and re-sends the outbox the owner may not have sent:
// every receiver recognises what it has had already.
//
// Mirror returns nil when ctx ends, and an error wrapping ErrGap when the log or the
// events stream no longer reaches back to its state (purged past it): a standby that
// fell behind the owner's backups starts again from the newest one.
func (s *Stage) Mirror(ctx context.Context) error {
	p := s.cfg.Partition
	if _, err := s.load(); err != nil {
		return err
	}
	defer s.uncountState()
	st := s.st
	s.logged.Store(st.Log)
	sj := s.cfg.Subjects
	r, err := flow.Read(ctx, s.js, sj.EventsStream(), sj.EventsStored(p), st.Pos, flow.Buffer{Msgs: 2 * s.cfg.MaxBatch, Bytes: ReadBytes})
	if err != nil {
		return err
	}
	defer r.Stop()
	lr, err := flow.Read(ctx, s.js, sj.LogStream(), sj.Log(p), st.Log, flow.Buffer{Msgs: 16, Bytes: ReadBytes})
	if err != nil {
		return err
	}
	defer lr.Stop()
	c := newCoalescer(s.cfg.Partitions)
	first := true
	for {
		var m jetstream.Msg
		select {
		case m = <-lr.C:
		case <-ctx.Done():
			return nil
		}
		rec, seq, err := decodeLog(m)
		applied := false
		if err == nil {
			applied, err = s.logRecord(ctx, rec, seq, r, c, first, false)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("standby of event partition %d: %w", p, err)
		}
		first = first && !applied
		s.logged.Store(s.st.Log)
	}
}

// LogBehind is how far a mirroring stage (Mirror) is behind its owner's log: the age
// of the oldest record the owner appended that it has not applied tells whether a
// standby is caught up, whatever the rate of the log.
func (s *Stage) LogBehind(ctx context.Context) (flow.Behind, error) {
	return s.logBehind.Behind(ctx, s.logged.Load(), time.Now())
}

// Position is the last events-stream sequence the stage's state reflects.
func (s *Stage) Position() uint64 { return s.pos.Load() }
