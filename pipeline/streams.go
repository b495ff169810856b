package pipeline

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamConfig says how the streams are made. Its tunable fields (replicas, the duplicate
// window, ages, the events stream's size and compression) follow one rule: a zero value
// keeps what an existing stream has (what an operator set with nats stream edit survives
// a restart), and gives a new stream Tally's default; a value set is applied to new and
// existing streams alike. What Tally needs of a stream is set or checked by Setup
// whatever this holds (see merge).
type StreamConfig struct {
	Subjects   Subjects
	Partitions int
	// Replicas of every stream; 0 keeps an existing stream's and gives a new one
	// NewReplicas (1 when 0).
	Replicas    int
	NewReplicas int
	// DupWindow is how long JetStream remembers a Nats-Msg-Id to drop a re-sent event
	// (DefaultDupWindow when new).
	DupWindow time.Duration
	// EventsMaxAge and DeltasMaxAge bound how long events and deltas are kept; a stage or
	// worker down for longer than this loses what it had not consumed.
	EventsMaxAge time.Duration
	DeltasMaxAge time.Duration
	// EventsMaxBytes bounds the events stream's size: -1 is unbounded (the default when
	// new). Above it the oldest events are dropped, consumed or not.
	EventsMaxBytes int64
	// EventsCompression is the events stream's storage compression: "s2" or "none" (the
	// default when new).
	EventsCompression string
	// ChangesMaxAge bounds the change stream, which is only for watchers.
	ChangesMaxAge time.Duration
	DLQMaxAge     time.Duration
	// KeyedEvents stores each event under its key's subject, <prefix>.ep.<p>.<type>.<key>,
	// as versions before 1.8 did, rather than under its partition's and type's; Setup
	// moves an existing events stream to the form asked. Stored by key, the server keeps
	// state for every key in the stream (~330 bytes of RAM each, for as long as its
	// events are kept: BenchmarkEventsStream) and a consumer of a partition walks it. A
	// tallyd reads both forms; one before 1.8 refuses the unkeyed one (every event
	// dead-lettered), so a rolling upgrade keeps it on until every tallyd runs 1.8.
	KeyedEvents bool
}

// Defaults of a new stream, for what StreamConfig leaves at zero.
const (
	DefaultEventsMaxAge  = 7 * 24 * time.Hour
	DefaultDeltasMaxAge  = 7 * 24 * time.Hour
	DefaultChangesMaxAge = time.Hour
	DefaultDLQMaxAge     = 30 * 24 * time.Hour
	DefaultDupWindow     = 2 * time.Minute
)

// DefaultStreamConfig returns the defaults, all set (an existing stream is changed to
// them): 16 partitions, one replica, a two-minute duplicate window, a week of events and
// deltas, an hour of changes, 30 days of dead letters, no bound on the events' size and
// no compression. Zero what an existing stream should keep.
func DefaultStreamConfig() StreamConfig {
	return StreamConfig{
		Subjects:          NewSubjects(""),
		Partitions:        16,
		Replicas:          1,
		DupWindow:         DefaultDupWindow,
		EventsMaxAge:      DefaultEventsMaxAge,
		DeltasMaxAge:      DefaultDeltasMaxAge,
		EventsMaxBytes:    -1,
		EventsCompression: "none",
		ChangesMaxAge:     DefaultChangesMaxAge,
		DLQMaxAge:         DefaultDLQMaxAge,
	}
}

// eventsTransform routes each event to its key's partition (see EventsStored), stored
// by key or not.
func (c StreamConfig) eventsTransform(keyed bool) *jetstream.SubjectTransformConfig {
	dest := fmt.Sprintf("%s.ep.{{partition(%d,2)}}.{{wildcard(1)}}", c.Subjects.Prefix, c.Partitions)
	if keyed {
		dest += ".{{wildcard(2)}}"
	}
	return &jetstream.SubjectTransformConfig{Source: c.Subjects.Events(), Destination: dest}
}

// compression reads a compression name; "" is none.
func compression(name string) (jetstream.StoreCompression, error) {
	switch name {
	case "", "none":
		return jetstream.NoCompression, nil
	case "s2":
		return jetstream.S2Compression, nil
	}
	return 0, fmt.Errorf("%w: compression %q: s2 or none", ErrStreamConfig, name)
}

// or is v, or def when v is zero.
func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Streams returns the configurations of the five streams as they are made new, each
// zero tunable at its default.
func (c StreamConfig) Streams() []jetstream.StreamConfig {
	s := c.Subjects
	base := func(name, subject string, age time.Duration) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage,
			Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardOld,
			MaxAge: age, Replicas: or(c.Replicas, max(c.NewReplicas, 1)), Duplicates: or(c.DupWindow, DefaultDupWindow),
			MaxBytes: -1, MaxMsgs: -1, MaxMsgsPerSubject: -1, MaxMsgSize: -1, MaxConsumers: -1,
		}
	}
	ev := base(s.EventsStream(), s.Events(), or(c.EventsMaxAge, DefaultEventsMaxAge))
	ev.SubjectTransform = c.eventsTransform(c.KeyedEvents)
	ev.Description = "Tally events, partitioned by key; Nats-Msg-Id deduplicates"
	ev.MaxBytes = or(c.EventsMaxBytes, -1)
	ev.Compression, _ = compression(c.EventsCompression) // Setup checked it
	de := base(s.DeltasStream(), s.Prefix+".delta.>", or(c.DeltasMaxAge, DefaultDeltasMaxAge))
	de.Description = "Tally deltas from the event stage to the counter workers"
	ch := base(s.ChangesStream(), s.Prefix+".chg.>", or(c.ChangesMaxAge, DefaultChangesMaxAge))
	ch.Description = "Tally count changes, one message per partition per flush"
	dl := base(s.DLQStream(), s.Prefix+".dlq.>", or(c.DLQMaxAge, DefaultDLQMaxAge))
	dl.Description = "Tally dead letters: malformed events with the reason"
	// The log never ages out: state backups purge what they cover, and always keep each
	// partition's last record, which the next append expects — an idle partition's would
	// otherwise expire and fence its own owner at every start. The backup pointers
	// (Subjects.BackupPointer) live here too, for the same reason.
	lg := base(s.LogStream(), s.Prefix+".log.>", 0)
	lg.Description = "Tally event-stage logs: each partition's transactions, fenced by the last sequence; state backup pointers"
	return []jetstream.StreamConfig{ev, de, ch, dl, lg}
}

// Setup creates the streams that are missing with Tally's configuration and merges it
// into those that exist (see merge): an operator's settings that Tally does not need
// stay, and a setting that would break Tally is refused with an error (ErrStreamConfig)
// naming the field and what Tally needs. It is idempotent, and updates a stream only
// when something changes. It refuses to change the partition count of an existing
// events stream (ErrPartitions): that would move keys between partitions while older
// events are still in the stream.
func Setup(ctx context.Context, js jetstream.JetStream, c StreamConfig) error {
	if c.Partitions < 1 || c.Partitions > 1024 {
		return fmt.Errorf("%w: partitions must be 1..1024, not %d", ErrStreamConfig, c.Partitions)
	}
	if _, err := compression(c.EventsCompression); err != nil {
		return err
	}
	for _, want := range c.Streams() {
		st, err := js.Stream(ctx, want.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			if _, err := js.CreateStream(ctx, want); err != nil {
				return fmt.Errorf("cannot create stream %s: %w", want.Name, err)
			}
			continue
		case err != nil:
			return fmt.Errorf("cannot look up stream %s: %w", want.Name, err)
		}
		have := st.CachedInfo().Config
		merged, err := c.merge(want, have)
		if err != nil {
			return err
		}
		if reflect.DeepEqual(merged, have) {
			continue
		}
		if _, err := js.UpdateStream(ctx, merged); err != nil {
			return fmt.Errorf("cannot update stream %s: %w", want.Name, err)
		}
	}
	return nil
}
