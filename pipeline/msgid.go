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

// DeadLetterMsgID names the dead letter of the message at stream sequence seq of a
// stage's partition p (index -1: the whole message; otherwise one event of a batch).
func DeadLetterMsgID(stage string, p int, seq uint64, index int) string {
	return fmt.Sprintf("dlq.%s.%d.%d.%d", stage, p, seq, index)
}

// LogMsgID names the log record of event partition p's transaction ending at stream
// position pos, written by owner (the node and its lease), so that a record of another
// owner is never taken for a re-sent one of ours.
func LogMsgID(p int, pos uint64, owner string) string {
	return fmt.Sprintf("log.%d.%d.%s", p, pos, owner)
}

// ChangeMsgID names part of the change events of counter partition family/p's
// checkpoint at deltas-stream position pos. The position, not the checkpoint's number:
// an owner that restored an older backup numbers its next checkpoints as the last owner
// did, at other positions and with other ids in them, and a message dropped as a
// duplicate of one with other content would hide a change from every mirror; the values
// at one position are the same whoever computed them.
func ChangeMsgID(family string, p int, pos uint64, part int) string {
	return fmt.Sprintf("chg.%s.%d.%d.%d", family, p, pos, part)
}

// ChangePos is the deltas-stream position in a ChangeMsgID (false when id is not one).
func ChangePos(id string) (uint64, bool) {
	rest, ok := strings.CutPrefix(id, "chg.")
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

// BatchMsgID names part n of a client batch tx that the client split for partition p.
func BatchMsgID(tx string, p, n int) string { return fmt.Sprintf("%s.%d.%d", tx, p, n) }

// AdminBatchMsgID names part n of the privileged events (system, incr) of client batch
// tx that the client split for partition p.
func AdminBatchMsgID(tx string, p, n int) string { return fmt.Sprintf("%s.admin.%d.%d", tx, p, n) }
