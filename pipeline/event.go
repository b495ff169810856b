package pipeline

import (
	"fmt"
	"slices"
	"strings"
)

// Event types, the <type> token of tally.ev.<type>.<key>.
const (
	TypeLike      = "like"
	TypeUnlike    = "unlike"
	TypeRepost    = "repost"
	TypeComment   = "comment"
	TypeUncomment = "uncomment"
	TypeView      = "view"
	TypePost      = "post"
	TypeFollow    = "follow"
	TypeUnfollow  = "unfollow"
	TypeMention   = "mention"
	TypeDM        = "dm"
	TypeRead      = "read"
	TypeIncr      = "incr"
	TypeSystem    = "system"
	// TypeNotify, TypePush and TypeFollower are internal: only event partitions send them
	// to each other, in hop batches; Validate refuses them from producers. A notify adds
	// one to Target's unread Field at Target's partition (for the event of place Seq),
	// moving there the notification placed at ID when ID is not 0; with N -1 it only takes
	// back the notification placed at Seq (its like or comment was undone); a push announces the
	// post Post of author UID (place Seq) to every partition, pushed to the followers'
	// feed counters, or left for them to pull when Field is PushPulled; a follower adds
	// (N 1) or removes (N -1) follower UID, followed at time TS, to Target's list of
	// followers in Target's partition.
	TypeNotify   = "notify"
	TypePush     = "push"
	TypeFollower = "follower"
	// TypeBatch is the subject token of a batch message; it is not an event type. A
	// batch may not carry the privileged types (system, incr): those go in a
	// TypeAdminBatch, whose subject only the admin grant may publish to.
	TypeBatch = "batch"
	// TypeAdminBatch is the subject token of a batch that may carry any event type.
	TypeAdminBatch = "adminbatch"
)

// PushPulled is the Field of a push event whose post is pulled by the followers.
const PushPulled = "pulled"

// MaxViewN bounds the n of one view or incr event.
const MaxViewN = 1 << 32

// Event is one thing that happened. Which fields are used depends on Type (see the table
// in docs/contract.md). The MessagePack form is a map with the JSON field names.
type Event struct {
	Type    string   `json:"type,omitempty" msgpack:"type,omitempty"`
	Tx      string   `json:"tx,omitempty" msgpack:"tx,omitempty"`
	UID     ID       `json:"uid,omitempty" msgpack:"uid,omitempty"`
	Post    ID       `json:"post,omitempty" msgpack:"post,omitempty"`
	Owner   ID       `json:"owner,omitempty" msgpack:"owner,omitempty"`
	Target  ID       `json:"target,omitempty" msgpack:"target,omitempty"`
	Comment ID       `json:"comment,omitempty" msgpack:"comment,omitempty"`
	Family  string   `json:"family,omitempty" msgpack:"family,omitempty"`
	ID      ID       `json:"id,omitempty" msgpack:"id,omitempty"`
	Field   string   `json:"field,omitempty" msgpack:"field,omitempty"`
	N       int64    `json:"n,omitempty" msgpack:"n,omitempty"`
	Kinds   []string `json:"kinds,omitempty" msgpack:"kinds,omitempty"`
	TS      int64    `json:"ts,omitempty" msgpack:"ts,omitempty"`
	// Local marks a copy of a system notice that Tally's own fan-out sent to one
	// partition; such a copy is counted there and not fanned out again. The event stage
	// clears it on what producers send.
	Local bool `json:"local,omitempty" msgpack:"local,omitempty"`
	// Seq is the event's place in the events stream, set by the event stage (whatever a
	// producer sent): its message's stream sequence times SeqSpan plus its index in a
	// batch, so the events of one batch keep their order. Events handed between
	// partitions keep it: unread compares it, never ts (see docs/contract.md, Unread).
	Seq uint64 `json:"seq,omitempty" msgpack:"seq,omitempty"`
}

// SeqSpan is how many event places one stream message spans in Event.Seq: more than
// the most events of a batch.
const SeqSpan = 1 << 14

// SeqOf is the Seq of the event at index i of the message stored at stream sequence seq.
func SeqOf(seq uint64, i int) uint64 { return seq*SeqSpan + uint64(i) }

// Batch is many events in one message, deduplicated as a whole by its Nats-Msg-Id.
type Batch struct {
	Events []Event `json:"events" msgpack:"events"`
}

// MaxBatch is the most events one batch message may hold.
const MaxBatch = 10_000

// unreadKinds are what a read event may reset: the notification counters, the feed and
// the system notices.
var unreadKinds = []string{"comment", "mention", "like", "dm", "feed", "system"}

// UnreadKinds returns the notification kinds a read event may name.
func UnreadKinds() []string { return append([]string(nil), unreadKinds...) }

// Key is the id that decides the event's partition: the acting user for user actions,
// the post for views, the notified user for mentions and messages, the id for incr.
func (e *Event) Key() ID {
	switch e.Type {
	case TypeView:
		return e.Post
	case TypeMention, TypeDM:
		return e.Target
	case TypeIncr, TypeSystem:
		return e.ID
	default:
		return e.UID
	}
}

// Privileged reports whether the event reaches beyond one user's actions — a notice to
// every user, an add to any counter — so that it needs the admin grant: its own subject
// (tally.ev.system.*, tally.ev.incr.*) or an admin batch, never a producer's batch.
func (e *Event) Privileged() bool { return e.Type == TypeSystem || e.Type == TypeIncr }

// Relational reports whether the event reads and writes state owned by its key's
// partition (relations, a reader's state, an author's followers and posts), so that
// it must be handled there. A view that says who viewed is too where viewers are
// counted (see stages/event).
func (e *Event) Relational() bool {
	switch e.Type {
	case TypeLike, TypeUnlike, TypeComment, TypeUncomment, TypeFollow, TypeUnfollow, TypeRead, TypePost:
		return true
	}
	return false
}

// ValidateInternal is Validate for an event inside a hop batch, which may also be of an
// internal type.
func (e *Event) ValidateInternal(fams Families) error {
	switch e.Type {
	case TypeNotify:
		if e.Target == 0 || e.Seq == 0 || !slices.Contains(unreadKinds[:4], e.Field) || (e.N != 0 && e.N != -1) {
			return fmt.Errorf("%w: notify event needs target, seq, a notification kind and n 0 or -1", ErrBadEvent)
		}
		return nil
	case TypePush:
		if e.UID == 0 || e.Post == 0 || e.Seq == 0 || (e.Field != "" && e.Field != PushPulled) {
			return fmt.Errorf("%w: push event needs uid, post and seq, and field empty or %q", ErrBadEvent, PushPulled)
		}
		return nil
	case TypeFollower:
		if e.UID == 0 || e.Target == 0 || (e.N != 1 && e.N != -1) {
			return fmt.Errorf("%w: follower event needs uid, target and n 1 or -1", ErrBadEvent)
		}
		return nil
	}
	return e.Validate(fams)
}

// Validate checks that the event has what its type needs and normalises what may be
// spelled in more than one way (read kinds are lower case), so that what passes
// validation is what the stage applies; the error wraps ErrBadEvent.
func (e *Event) Validate(fams Families) error {
	need := func(name string, v ID) error {
		if v == 0 {
			return fmt.Errorf("%w: %s event needs %s", ErrBadEvent, e.Type, name)
		}
		return nil
	}
	var err error
	switch e.Type {
	case TypeLike, TypeUnlike, TypeRepost:
		err = firstErr(need("uid", e.UID), need("post", e.Post))
	case TypeComment, TypeUncomment:
		err = firstErr(need("uid", e.UID), need("post", e.Post), need("comment", e.Comment))
	case TypePost:
		err = firstErr(need("uid", e.UID), need("post", e.Post))
	case TypeFollow, TypeUnfollow:
		err = firstErr(need("uid", e.UID), need("target", e.Target))
		if err == nil && e.UID == e.Target {
			err = fmt.Errorf("%w: a user cannot follow themself", ErrBadEvent)
		}
	case TypeMention, TypeDM:
		err = firstErr(need("uid", e.UID), need("target", e.Target))
	case TypeView:
		err = need("post", e.Post)
		if err == nil && (e.N < 0 || e.N > MaxViewN) {
			err = fmt.Errorf("%w: view n=%d out of range 1..%d", ErrBadEvent, e.N, MaxViewN)
		}
	case TypeRead:
		err = need("uid", e.UID)
		for i, k := range e.Kinds {
			// Validation and application share one spelling: the stage looks kinds up
			// as written here.
			e.Kinds[i] = strings.ToLower(k)
			if !slices.Contains(unreadKinds, e.Kinds[i]) {
				err = fmt.Errorf("%w: read kind %q is not one of %v", ErrBadEvent, k, unreadKinds)
			}
		}
	case TypeIncr:
		err = need("id", e.ID)
		if err == nil {
			err = e.validateIncr(fams)
		}
	case TypeSystem:
		err = need("id", e.ID)
	case "":
		err = fmt.Errorf("%w: missing type", ErrBadEvent)
	default:
		err = fmt.Errorf("%w: unknown type %q", ErrBadEvent, e.Type)
	}
	return err
}

func (e *Event) validateIncr(fams Families) error {
	f, err := fams.Lookup(e.Family)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadEvent, err)
	}
	if _, err := f.Field(e.Field); err != nil {
		return fmt.Errorf("%w: %w", ErrBadEvent, err)
	}
	if e.N == 0 || e.N > MaxViewN || e.N < -MaxViewN {
		return fmt.Errorf("%w: incr n=%d must be non-zero and within ±%d", ErrBadEvent, e.N, MaxViewN)
	}
	return nil
}

// types are the event types, in the order of Types and TypeIndex.
var types = [...]string{TypeLike, TypeUnlike, TypeRepost, TypeComment, TypeUncomment, TypeView, TypePost,
	TypeFollow, TypeUnfollow, TypeMention, TypeDM, TypeRead, TypeIncr, TypeSystem}

// NumTypes is the number of event types.
const NumTypes = len(types)

// Types lists the event types.
func Types() []string { return slices.Clone(types[:]) }

// TypeIndex is t's place in Types, or -1 when t is not an event type (an internal one
// of a hop batch, or none).
func TypeIndex(t string) int { return slices.Index(types[:], t) }

// ValidType reports whether t is an event type.
func ValidType(t string) bool { return TypeIndex(t) >= 0 }

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
