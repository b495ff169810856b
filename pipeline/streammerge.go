package pipeline

import (
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// merge returns the configuration an existing stream is updated to: the stream's own,
// with what Tally needs set and what the operator asked for through c (its non-zero
// tunables) applied. Whatever else an operator set (placement, max bytes, messages and
// message size, compression, metadata, consumer limits, direct gets, the description)
// stays as it is. A setting under which Tally would lose or refuse what it must keep is
// an error naming the field and the value Tally needs; the rules are in docs/operations.md
// (Running, Stream settings).
func (c StreamConfig) merge(want, have jetstream.StreamConfig) (jetstream.StreamConfig, error) {
	s := c.Subjects
	name := want.Name
	refuse := func(field string, got, need any, why string) error {
		return fmt.Errorf("%w: stream %s has %s %v, Tally needs %v (%s); change it with nats stream edit",
			ErrStreamConfig, name, field, got, need, why)
	}
	// The stages read each stream from positions they keep themselves, with ordered
	// consumers, which hold no interest: another retention drops what they have not read.
	if have.Retention != jetstream.LimitsPolicy {
		return have, refuse("retention", have.Retention, jetstream.LimitsPolicy, "stages read through ordered consumers, which hold no interest")
	}
	// Producers, hops and log appends must always be stored: a full stream refusing them
	// would stop every partition, and the log, which never ages out, would stay full.
	if have.Discard != jetstream.DiscardOld {
		return have, refuse("discard", "new", "old", "a full stream must not refuse hops and log appends")
	}
	if !slices.Equal(have.Subjects, want.Subjects) {
		return have, refuse("subjects", have.Subjects, want.Subjects, "the stages publish and read these")
	}
	if have.Mirror != nil || have.Sealed {
		return have, refuse("a mirror or seal", "set", "none", "Tally publishes to its streams")
	}
	merged := have
	consumed := name == s.EventsStream() || name == s.DeltasStream() || name == s.LogStream()
	if consumed {
		// What a stage has not consumed yet must survive a restart of NATS.
		if have.Storage != jetstream.FileStorage {
			return have, refuse("storage", have.Storage, jetstream.FileStorage, "unconsumed messages must survive a NATS restart")
		}
		// Subjects are a partition's events of a type (a key's, KeyedEvents), deltas or log
		// records: a limit per subject drops some of them while the others stay,
		// unconsumed or not backed up.
		if have.MaxMsgsPerSubject > 0 {
			return have, refuse("max messages per subject", have.MaxMsgsPerSubject, -1, "it drops a key's or a partition's messages before they are applied")
		}
	}
	if (name == s.DeltasStream() || name == s.LogStream()) && have.DenyPurge {
		return have, refuse("deny purge", true, false, "counters purge applied deltas, backups purge the log records they cover")
	}
	switch name {
	case s.EventsStream():
		// The same partitions stored by key or not are one routing (KeyedEvents).
		tr := want.SubjectTransform
		if h := have.SubjectTransform; h != nil && *h != *c.eventsTransform(true) && *h != *c.eventsTransform(false) {
			return have, fmt.Errorf("%w: stream %s routes %q by %q, this configuration %q by %q",
				ErrPartitions, name, h.Source, h.Destination, tr.Source, tr.Destination)
		}
		merged.SubjectTransform = tr
		if c.EventsMaxAge != 0 {
			merged.MaxAge = want.MaxAge
		}
		if c.EventsMaxBytes != 0 {
			merged.MaxBytes = want.MaxBytes
		}
		if c.EventsCompression != "" {
			merged.Compression = want.Compression
		}
	case s.DeltasStream():
		if c.DeltasMaxAge != 0 {
			merged.MaxAge = want.MaxAge
		}
	case s.ChangesStream():
		if c.ChangesMaxAge != 0 {
			merged.MaxAge = want.MaxAge
		}
	case s.DLQStream():
		if c.DLQMaxAge != 0 {
			merged.MaxAge = want.MaxAge
		}
	case s.LogStream():
		// A new owner replays every record after the last backup: none may age out or be
		// dropped for room. Versions before 6a82880 gave the log a max age, which this
		// takes away.
		merged.MaxAge = 0
		if have.MaxBytes > 0 || have.MaxMsgs > 0 {
			return have, refuse("max bytes or messages", fmt.Sprintf("%d bytes, %d messages", have.MaxBytes, have.MaxMsgs), -1,
				"a new owner replays every record after the last backup")
		}
	}
	if c.Replicas > 0 {
		merged.Replicas = c.Replicas
	}
	if c.DupWindow > 0 {
		merged.Duplicates = c.DupWindow
	}
	return merged, nil
}
