package pipeline

import (
	"fmt"
	"strconv"
	"strings"
)

// Message ids. Exactly-once depends on every message Tally publishes itself carrying the
// same id when it is sent again (after a failed publish, a crash or a takeover), so each
// kind is built here and nowhere else. Ids are only a second line of defence inside the
// duplicate window: internal hops are deduplicated for ever by their gap-free sequence
// (stages/hop), not by these ids.

// DeltaMsgID names batch seq of deltas from event partition src to the counter partition
// dest ("family.p").
func DeltaMsgID(src int, dest string, seq uint64) string {
	return "d." + strconv.Itoa(src) + "." + dest + "." + strconv.FormatUint(seq, 10)
}

// ParseDeltaMsgID reads a DeltaMsgID back (ok false when id is not one): a counter
// partition that cannot decode a batch still knows, from its id, which number it fills.
func ParseDeltaMsgID(id string) (src int, dest string, seq uint64, ok bool) {
	rest, ok := strings.CutPrefix(id, "d.")
	if !ok {
		return 0, "", 0, false
	}
	s, rest, ok := strings.Cut(rest, ".")
	i := strings.LastIndexByte(rest, '.')
	if !ok || i <= 0 {
		return 0, "", 0, false
	}
	n, err := strconv.ParseUint(s, 10, 31)
	if err != nil {
		return 0, "", 0, false
	}
	if seq, err = strconv.ParseUint(rest[i+1:], 10, 64); err != nil || seq == 0 {
		return 0, "", 0, false
	}
	return int(n), rest[:i], seq, true
}

// HopMsgID names batch seq of events from event partition src to event partition dest:
// relation events of a batch that belong to dest, and copies of system notices.
func HopMsgID(src, dest int, seq uint64) string {
	return fmt.Sprintf("hop.%d.%d.%d", src, dest, seq)
}

// ParseHopMsgID reads a HopMsgID back (ok false when id is not one): an event partition
// that dead-letters a hop batch still knows, from its id, which number it fills.
func ParseHopMsgID(id string) (src, dest int, seq uint64, ok bool) {
	f := strings.Split(id, ".")
	if len(f) != 4 || f[0] != "hop" {
		return 0, 0, 0, false
	}
	s, err1 := strconv.ParseUint(f[1], 10, 31)
	d, err2 := strconv.ParseUint(f[2], 10, 31)
	seq, err3 := strconv.ParseUint(f[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || seq == 0 {
		return 0, 0, 0, false
	}
	return int(s), int(d), seq, true
}

// DeadLetterMsgID names the dead letter of the message at stream sequence seq of a
// stage's partition p (index -1: the whole message; otherwise one event of a batch).
func DeadLetterMsgID(stage string, p int, seq uint64, index int) string {
	return fmt.Sprintf("dlq.%s.%d.%d.%d", stage, p, seq, index)
}

// LogMsgID names the log record of event partition p's transaction number n (see
// stagelog.State.N), ending at stream position pos, written by owner (the node and its
// lease), so that a record of another owner is never taken for a re-sent one of ours,
// nor a transaction that consumed no message (it released held hop batches) for the one
// before it at the same position.
func LogMsgID(p int, pos, n uint64, owner string) string {
	return fmt.Sprintf("log.%d.%d.%d.%s", p, pos, n, owner)
}

// ChangeMsgID names part of the change events of checkpoint n of counter partition
// family/p, taken at deltas-stream position pos; prev is the position of the checkpoint
// before it. owner is drawn by each run of a worker: two owners never share an id, since
// their checkpoints at one position may hold other ids in each part (one restored from
// an older backup covers more, a table's order differs) and a part dropped as a duplicate
// of another owner's would hide its ids from every mirror. A part sent again (after a
// crash, by whoever restores the outbox) keeps its id, stored with it.
//
// A worker sends a checkpoint's parts only once every part of its earlier checkpoints is
// stored, so once any part is stored, its owner has announced every id changed in the
// stream before prev (see ChangePrev).
func ChangeMsgID(family string, p int, pos, prev uint64, owner uint32, n uint64, part int) string {
	return fmt.Sprintf("chg2.%s.%d.%d.%d.%08x.%d.%d", family, p, pos, prev, owner, n, part)
}

// changeV1 is the prefix of the change ids of older versions: chg.<family>.<p>.<pos>.<part>.
const changeV1, changeV2 = "chg.", "chg2."

// ChangePos is the deltas-stream position in a change message id, of this version or an
// older one (false when id is neither).
func ChangePos(id string) (uint64, bool) {
	if _, ok := strings.CutPrefix(id, changeV2); ok {
		return changeField(id, 5)
	}
	rest, ok := strings.CutPrefix(id, changeV1)
	if !ok {
		return 0, false
	}
	f := strings.Split(rest, ".")
	if len(f) < 3 {
		return 0, false
	}
	pos, err := strconv.ParseUint(f[len(f)-2], 10, 64)
	return pos, err == nil
}

// ChangePrev is the position of the checkpoint before the one a ChangeMsgID names: every
// checkpoint its owner took before it is announced whole once that id is stored. False
// for ids of older versions, whose parts say nothing of the parts around them.
func ChangePrev(id string) (uint64, bool) { return changeField(id, 4) }

// ChangeCheckpoint is the owner and the checkpoint number a ChangeMsgID names. One owner
// sends its checkpoints in order, each once every part of those before it is stored: a
// stored id says that its owner's checkpoints numbered below it are stored whole. False
// for ids of older versions.
func ChangeCheckpoint(id string) (owner uint32, n uint64, ok bool) {
	if n, ok = changeField(id, 2); !ok {
		return 0, 0, false
	}
	f := strings.Split(id, ".")
	o, err := strconv.ParseUint(f[len(f)-3], 16, 32)
	if err != nil {
		return 0, 0, false
	}
	return uint32(o), n, true
}

// changeField is the number fromEnd fields before the end of a ChangeMsgID (the family
// may hold dots: fields are counted from the end).
func changeField(id string, fromEnd int) (uint64, bool) {
	rest, ok := strings.CutPrefix(id, changeV2)
	if !ok {
		return 0, false
	}
	f := strings.Split(rest, ".")
	if len(f) < 7 {
		return 0, false
	}
	v, err := strconv.ParseUint(f[len(f)-fromEnd], 10, 64)
	return v, err == nil
}

// BatchMsgID names part n of a client batch tx that the client split for partition p.
func BatchMsgID(tx string, p, n int) string { return fmt.Sprintf("%s.%d.%d", tx, p, n) }

// AdminBatchMsgID names part n of the privileged events (system, incr) of client batch
// tx that the client split for partition p.
func AdminBatchMsgID(tx string, p, n int) string { return fmt.Sprintf("%s.admin.%d.%d", tx, p, n) }

// EmptyBatch returns the payload of an empty batch with the source and number of the
// delta batch or hop batch that id names (a DeltaMsgID or a HopMsgID); false for any
// other id. Published under id in place of a batch that can never be stored (larger
// than its stream takes), it fills that number at the destination, whose channel would
// otherwise wait at the gap and, past the receiver's limit, give it up.
func EmptyBatch(id string) ([]byte, bool) {
	if src, _, seq, ok := ParseDeltaMsgID(id); ok {
		return AppendDeltaBatch(nil, &DeltaBatch{Source: uint32(src), Seq: seq}), true
	}
	src, _, seq, ok := ParseHopMsgID(id)
	if !ok {
		return nil, false
	}
	data, err := Marshal(&HopBatch{Source: uint32(src), Seq: seq}, false)
	return data, err == nil
}
