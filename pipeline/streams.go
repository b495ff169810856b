package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamConfig says how the streams are made.
type StreamConfig struct {
	Subjects   Subjects
	Partitions int
	Replicas   int
	// DupWindow is how long JetStream remembers a Nats-Msg-Id to drop a re-sent event.
	DupWindow time.Duration
	// EventsMaxAge and DeltasMaxAge bound how long events and deltas are kept; a stage or
	// worker down for longer than this loses what it had not consumed. An EventsMaxAge of
	// 0 keeps the existing events stream's (what an operator set with nats stream edit),
	// or DefaultEventsMaxAge for a new stream.
	EventsMaxAge time.Duration
	DeltasMaxAge time.Duration
	// ChangesMaxAge bounds the change stream, which is only for watchers.
	ChangesMaxAge time.Duration
	DLQMaxAge     time.Duration
}

// DefaultStreamConfig returns the defaults: 16 partitions, one replica, a two-minute
// duplicate window, a week of events and deltas, an hour of changes, 30 days of dead letters.
func DefaultStreamConfig() StreamConfig {
	return StreamConfig{
		Subjects:      NewSubjects(""),
		Partitions:    16,
		Replicas:      1,
		DupWindow:     2 * time.Minute,
		EventsMaxAge:  DefaultEventsMaxAge,
		DeltasMaxAge:  7 * 24 * time.Hour,
		ChangesMaxAge: time.Hour,
		DLQMaxAge:     30 * 24 * time.Hour,
	}
}

func (c StreamConfig) eventsTransform() *jetstream.SubjectTransformConfig {
	return &jetstream.SubjectTransformConfig{
		Source:      c.Subjects.Events(),
		Destination: fmt.Sprintf("%s.ep.{{partition(%d,2)}}.{{wildcard(1)}}.{{wildcard(2)}}", c.Subjects.Prefix, c.Partitions),
	}
}

// Streams returns the configurations of the five streams.
func (c StreamConfig) Streams() []jetstream.StreamConfig {
	s := c.Subjects
	base := func(name, subject string, age time.Duration) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage,
			Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardOld,
			MaxAge: age, Replicas: c.Replicas, Duplicates: c.DupWindow,
		}
	}
	ev := base(s.EventsStream(), s.Events(), c.EventsMaxAge)
	ev.SubjectTransform = c.eventsTransform()
	ev.Description = "Tally events, partitioned by key; Nats-Msg-Id deduplicates"
	de := base(s.DeltasStream(), s.Prefix+".delta.>", c.DeltasMaxAge)
	de.Description = "Tally deltas from the event stage to the counter workers"
	ch := base(s.ChangesStream(), s.Prefix+".chg.>", c.ChangesMaxAge)
	ch.Description = "Tally count changes, one message per partition per flush"
	dl := base(s.DLQStream(), s.Prefix+".dlq.>", c.DLQMaxAge)
	dl.Description = "Tally dead letters: malformed events with the reason"
	// The log never ages out: state backups purge what they cover, and always keep each
	// partition's last record, which the next append expects — an idle partition's would
	// otherwise expire and fence its own owner at every start. The backup pointers
	// (Subjects.BackupPointer) live here too, for the same reason.
	lg := base(s.LogStream(), s.Prefix+".log.>", 0)
	lg.Description = "Tally event-stage logs: each partition's transactions, fenced by the last sequence; state backup pointers"
	return []jetstream.StreamConfig{ev, de, ch, dl, lg}
}

// DefaultEventsMaxAge is how long a new events stream keeps events.
const DefaultEventsMaxAge = 7 * 24 * time.Hour

// Setup creates the streams or updates them to the configuration. It is idempotent. It
// refuses to change the partition count of an existing events stream: that would move
// keys between partitions while older events are still in the stream.
func Setup(ctx context.Context, js jetstream.JetStream, c StreamConfig) error {
	if c.Partitions < 1 || c.Partitions > 1024 {
		return fmt.Errorf("partitions must be 1..1024, not %d", c.Partitions)
	}
	want := c.eventsTransform().Destination
	st, err := js.Stream(ctx, c.Subjects.EventsStream())
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if c.EventsMaxAge == 0 {
			c.EventsMaxAge = DefaultEventsMaxAge
		}
	case err != nil:
		return fmt.Errorf("cannot look up stream %s: %w", c.Subjects.EventsStream(), err)
	default:
		if tr := st.CachedInfo().Config.SubjectTransform; tr != nil && tr.Destination != want {
			return fmt.Errorf("%w: stream %s routes by %q, this configuration by %q",
				ErrPartitions, c.Subjects.EventsStream(), tr.Destination, want)
		}
		if c.EventsMaxAge == 0 { // an operator's retention survives a restart
			c.EventsMaxAge = st.CachedInfo().Config.MaxAge
		}
	}
	for _, sc := range c.Streams() {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("cannot set up stream %s: %w", sc.Name, err)
		}
	}
	return nil
}
