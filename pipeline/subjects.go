package pipeline

import (
	"fmt"
	"strconv"
	"strings"
)

// Subjects names every subject and stream under one prefix ("tally" by default).
type Subjects struct {
	Prefix string
}

// DefaultPrefix is the subject prefix used unless configured otherwise.
const DefaultPrefix = "tally"

// NewSubjects returns the subjects under prefix (DefaultPrefix when empty).
func NewSubjects(prefix string) Subjects {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Subjects{Prefix: prefix}
}

func (s Subjects) join(parts ...string) string {
	return s.Prefix + "." + strings.Join(parts, ".")
}

// Event is where producers publish: <prefix>.ev.<type>.<key>.
func (s Subjects) Event(typ string, key ID) string { return s.join("ev", typ, key.String()) }

// Events matches every event subject a producer may publish to.
func (s Subjects) Events() string { return s.join("ev", "*", "*") }

// EventsStored is what the event stage of partition p reads: <prefix>.ep.<p>.>. The
// events stream stores an event published on <prefix>.ev.<type>.<key> under
// <prefix>.ep.<p>.<type>, p its key's partition; under <prefix>.ep.<p>.<type>.<key>
// before 1.8 and with StreamConfig.KeyedEvents (see there).
func (s Subjects) EventsStored(p int) string { return s.join("ep", strconv.Itoa(p), ">") }

// StoredType returns the type token of a subject the events stream stores an event
// under, in either form (see EventsStored), and ErrBadEvent for any other subject.
func (s Subjects) StoredType(subj string) (string, error) {
	rest, ok1 := strings.CutPrefix(subj, s.Prefix)
	rest, ok2 := strings.CutPrefix(rest, ".ep.")
	_, rest, ok3 := strings.Cut(rest, ".") // the partition
	typ, key, keyed := strings.Cut(rest, ".")
	if !(ok1 && ok2 && ok3) || (keyed && (key == "" || strings.Contains(key, "."))) {
		return "", fmt.Errorf("%w: unexpected subject %q", ErrBadEvent, subj)
	}
	return typ, nil
}

// Delta is the subject of deltas for one counter partition.
func (s Subjects) Delta(family string, p int) string { return s.join("delta", family, strconv.Itoa(p)) }

// Change is the subject of change events of one counter partition.
func (s Subjects) Change(family string, p int) string { return s.join("chg", family, strconv.Itoa(p)) }

// Changes matches the change events of every partition of a family.
func (s Subjects) Changes(family string) string { return s.join("chg", family, "*") }

// DLQ is the dead-letter subject of one partition of a stage.
func (s Subjects) DLQ(stage string, p int) string { return s.join("dlq", stage, strconv.Itoa(p)) }

// Log is the subject of partition p's event-stage log: every transaction of the stage,
// stored before it commits, so that a new owner continues exactly where the last one
// stopped (see stages/event).
func (s Subjects) Log(p int) string { return s.join("log", strconv.Itoa(p)) }

// BackupPointer is the subject, in the log stream, of the record naming the current state
// backup of name ("events", "counters.<p>"): it changes only by compare-and-set on the
// subject's last sequence, so an owner that lost the partition cannot make its backup
// current (see stages/node).
func (s Subjects) BackupPointer(name string) string { return s.join("log", "backup", name) }

// Get is the batch query subject of a family.
func (s Subjects) Get(family string) string { return s.join("get", family) }

// GetAt is where the process of token answers gets of the ids of the partitions of a
// family it serves (1.9, see WhereHeader): <prefix>.get.<family>.at.<token>, within a
// reader's permissions of <prefix>.get.> but not of <prefix>.get.*.
func (s Subjects) GetAt(family, token string) string { return s.join("get", family, "at", token) }

// GetsAt is what the process of token subscribes to answer GetAt of every family.
func (s Subjects) GetsAt(token string) string { return s.join("get", "*", "at", token) }

// Top is where the ids of a family whose field changed most over a window are asked
// (a TopRequest, a TopReply).
func (s Subjects) Top(family string) string { return s.join("top", family) }

// TopChanges is where a watched top (TopRequest.Watch) is published whole each time it
// changes: <prefix>.topchg.<family>.<field>.<window>.<limit>, the limit as answered (100
// for 0).
func (s Subjects) TopChanges(family, field, window string, limit int) string {
	return s.join("topchg", family, field, window, strconv.Itoa(limit))
}

// Part is where the process owning partition p of a family answers other processes'
// requests for the counters of ids in that partition (a GetRequest, a GetReply).
func (s Subjects) Part(family string, p int) string { return s.join("part", family, strconv.Itoa(p)) }

// Peer is where a process answers another's get of the ids of several partitions of a
// family that it owns, in one request (a GetRequest, a GetReply whose Unavailable lists
// the ids of partitions it does not own now): <prefix>.part.<family>.peer.<token>, token
// the process's own (Peers). A process learns another's token from its replies on Part.
// Five tokens after the prefix where Part has four, so neither matches the other.
func (s Subjects) Peer(family, token string) string { return s.join("part", family, "peer", token) }

// Peers is what the process of token subscribes to answer Peer requests of every family.
func (s Subjects) Peers(token string) string { return s.join("part", "*", "peer", token) }

// Standby is where a process keeping a standby of partition p of a family answers the
// counters of ids in it from the state the standby has applied (a GetRequest, a
// GetReply whose Stale says how far behind it is): what a get asks when no process owns
// the partition.
func (s Subjects) Standby(family string, p int) string {
	return s.join("standby", family, strconv.Itoa(p))
}

// PartEvents is where the process owning event partition p answers the relation queries
// (and audit recounts) that read that partition's state, for other processes:
// <prefix>.part.ev.<p>. No family may be named "ev", or its Part subjects would be these.
func (s Subjects) PartEvents(p int) string { return s.join("part", "ev", strconv.Itoa(p)) }

// Query subjects.
func (s Subjects) Liked() string     { return s.join("liked") }
func (s Subjects) LikesUser() string { return s.join("likes", "user") }
func (s Subjects) LikesPost() string { return s.join("likes", "post") }
func (s Subjects) Following() string { return s.join("following") }
func (s Subjects) Followers() string { return s.join("followers") }
func (s Subjects) Unread() string    { return s.join("unread") }
func (s Subjects) Health() string    { return s.join("health") }

// Stream names.
func (s Subjects) stream(kind string) string {
	return strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(s.Prefix)) + "_" + kind
}
func (s Subjects) EventsStream() string  { return s.stream("EVENTS") }
func (s Subjects) DeltasStream() string  { return s.stream("DELTAS") }
func (s Subjects) ChangesStream() string { return s.stream("CHANGES") }
func (s Subjects) DLQStream() string     { return s.stream("DLQ") }
func (s Subjects) LogStream() string     { return s.stream("LOG") }

// OwnersBucket is the KV bucket of partition ownership leases.
func (s Subjects) OwnersBucket() string { return s.stream("OWNERS") }

// StateBucket is the object store of state backups.
func (s Subjects) StateBucket() string { return s.stream("STATE") }
