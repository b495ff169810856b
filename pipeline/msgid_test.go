package pipeline

import "testing"

// The formats are part of what a re-send after a crash or takeover must reproduce: a
// change here makes a re-sent message look new inside the duplicate window.
func TestMsgIDs(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{DeltaMsgID(3, "post.7", 42), "d.3.post.7.42"},
		{HopMsgID(3, 7, 42), "hop.3.7.42"},
		{DeadLetterMsgID("event", 3, 42, -1), "dlq.event.3.42.-1"},
		{LogMsgID(3, 42, 5, "n1.9"), "log.3.42.5.n1.9"},
		{ChangeMsgID("post", 3, 42, 40, 0xbeef, 9, 1), "chg2.post.3.42.40.0000beef.9.1"},
		{BatchMsgID("tx", 3, 1), "tx.3.1"},
		{AdminBatchMsgID("tx", 3, 1), "tx.admin.3.1"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestParseDeltaMsgID(t *testing.T) {
	f := func(id string, src int, dest string, seq uint64, ok bool) {
		t.Helper()
		s, d, q, k := ParseDeltaMsgID(id)
		if s != src || d != dest || q != seq || k != ok {
			t.Errorf("%q: %d %q %d %v, want %d %q %d %v", id, s, d, q, k, src, dest, seq, ok)
		}
	}
	f(DeltaMsgID(3, "post.7", 42), 3, "post.7", 42, true)
	f(DeltaMsgID(0, "un.read.12", 1), 0, "un.read.12", 1, true)
	f("d.3.post.7.0", 0, "", 0, false)
	f("d.3.post7", 0, "", 0, false)
	f("d.x.post.7.4", 0, "", 0, false)
	f("d.-1.post.7.4", 0, "", 0, false)
	f("d.3..4", 0, "", 0, false)
	f("hop.3.7.42", 0, "", 0, false)
	f("d3", 0, "", 0, false)
	f("", 0, "", 0, false)
}

// Change ids of this version and of older ones give their position; only this version's
// give the previous checkpoint's.
func TestChangePos(t *testing.T) {
	f := func(id string, pos uint64, posOK bool, prev uint64, prevOK bool) {
		t.Helper()
		p, ok := ChangePos(id)
		q, ok2 := ChangePrev(id)
		if p != pos || ok != posOK || q != prev || ok2 != prevOK {
			t.Errorf("%q: pos %d %v, prev %d %v; want %d %v, %d %v", id, p, ok, q, ok2, pos, posOK, prev, prevOK)
		}
	}
	f(ChangeMsgID("post", 3, 42, 40, 7, 9, 1), 42, true, 40, true)
	f(ChangeMsgID("un.read", 0, 1, 0, 0xffffffff, 1, 0), 1, true, 0, true)
	f("chg.post.3.42.1", 42, true, 0, false) // an older version's
	f("chg.post.3.x.1", 0, false, 0, false)
	f("chg2.post.3.42.1", 0, false, 0, false)
	f("d.3.post.7.42", 0, false, 0, false)
}

// This version's change ids give their owner and checkpoint number; older ones none.
func TestChangeCheckpoint(t *testing.T) {
	f := func(id string, owner uint32, n uint64, ok bool) {
		t.Helper()
		if o, m, k := ChangeCheckpoint(id); o != owner || m != n || k != ok {
			t.Errorf("%q: owner %x, checkpoint %d, %v; want %x, %d, %v", id, o, m, k, owner, n, ok)
		}
	}
	f(ChangeMsgID("post", 3, 42, 40, 7, 9, 1), 7, 9, true)
	f(ChangeMsgID("un.read", 0, 1, 0, 0xffffffff, 1<<40, 0), 0xffffffff, 1<<40, true)
	f("chg.post.3.42.1", 0, 0, false)
	f("chg2.post.3.42.40.zz.9.1", 0, 0, false)
	f("chg2.post.3.42.1", 0, 0, false)
}

func TestParseHopMsgID(t *testing.T) {
	f := func(t *testing.T, id string, src, dest int, seq uint64, ok bool) {
		t.Helper()
		s, d, q, k := ParseHopMsgID(id)
		if s != src || d != dest || q != seq || k != ok {
			t.Fatalf("%q: %d %d %d %v, want %d %d %d %v", id, s, d, q, k, src, dest, seq, ok)
		}
	}
	t.Run("made", func(t *testing.T) { f(t, HopMsgID(3, 7, 42), 3, 7, 42, true) })
	t.Run("delta", func(t *testing.T) { f(t, DeltaMsgID(3, "post.7", 42), 0, 0, 0, false) })
	t.Run("zero", func(t *testing.T) { f(t, "hop.1.2.0", 0, 0, 0, false) })
	t.Run("short", func(t *testing.T) { f(t, "hop.1.2", 0, 0, 0, false) })
	t.Run("junk", func(t *testing.T) { f(t, "hop.x.2.3", 0, 0, 0, false) })
}

// The empty batch that fills a delta or hop batch's number decodes to that source and
// number, with nothing in it; other ids have none.
func TestEmptyBatch(t *testing.T) {
	data, ok := EmptyBatch(DeltaMsgID(3, "post.7", 42))
	var d DeltaBatch
	if err := DecodeDeltaBatch(data, &d); !ok || err != nil || d.Source != 3 || d.Seq != 42 || len(d.Deltas) != 0 {
		t.Fatalf("delta: %v %v %+v", ok, err, d)
	}
	data, ok = EmptyBatch(HopMsgID(3, 7, 42))
	h, err := DecodeHopBatch(data, DefaultFamilies())
	if !ok || err != nil || h.Source != 3 || h.Seq != 42 || len(h.Events) != 0 {
		t.Fatalf("hop: %v %v %+v", ok, err, h)
	}
	for _, id := range []string{DeadLetterMsgID("event", 3, 42, -1), LogMsgID(3, 42, 1, "n1.9"), ChangeMsgID("post", 3, 42, 40, 7, 9, 1),
		BatchMsgID("tx", 3, 1), "d.x.post.7.42", "hop.3.7.0", "hop.3.7.42.1", "d.3.post.7.x", ""} {
		if _, ok := EmptyBatch(id); ok {
			t.Errorf("EmptyBatch(%q) made a batch", id)
		}
	}
}
