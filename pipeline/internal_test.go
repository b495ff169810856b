package pipeline

import (
	"bytes"
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// Internal types pass only inside hop batches: a producer sending one is refused.
func TestInternalTypesOnlyInHops(t *testing.T) {
	fams := Families(DefaultFamilies())
	for _, e := range []Event{
		{Type: TypeNotify, Target: 7, Field: "like", Seq: SeqOf(3, 1)},
		{Type: TypePush, UID: 7, Post: 9, Seq: SeqOf(3, 0)},
	} {
		if err := e.Validate(fams); !errors.Is(err, ErrBadEvent) {
			t.Errorf("%s from a producer: %v, want ErrBadEvent", e.Type, err)
		}
		if err := e.ValidateInternal(fams); err != nil {
			t.Errorf("%s in a hop batch: %v", e.Type, err)
		}
		data, _ := Marshal(&HopBatch{Source: 1, Seq: 1, Events: []Event{e}}, false)
		if _, err := DecodeHopBatch(data, fams); err != nil {
			t.Errorf("hop batch with %s: %v", e.Type, err)
		}
	}
	bad := Event{Type: TypeNotify, Target: 7, Field: "feed", Seq: 1} // feed is not a notification
	if err := bad.ValidateInternal(fams); !errors.Is(err, ErrBadEvent) {
		t.Errorf("notify of feed: %v, want ErrBadEvent", err)
	}
	if SeqOf(2, 0) <= SeqOf(1, MaxBatch-1) {
		t.Errorf("a batch's places run into the next message's")
	}
}

// decodeMsgpack is how events and batches were decoded before mpReader: the payload
// checked, then read through a msgpack.Decoder by the DecodeMsgpack methods. It is the
// reference the reader is held to (FuzzMsgpackReader).
func decodeMsgpack(data []byte, read func(dec *msgpack.Decoder) error) error {
	if err := checkMsgpack(data); err != nil {
		return err
	}
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.Reset(bytes.NewReader(data))
	return read(dec)
}
