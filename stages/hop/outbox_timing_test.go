package hop

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tally-dev/tally/store/delivery"
)

// ackedPub acknowledges every publish at once.
type ackedPub struct{}

func (ackedPub) PublishMsgAsync(msg *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	f := newFuture(msg)
	f.ok <- &jetstream.PubAck{}
	return f, nil
}

// BenchmarkOutbox sends a stage's outbox as it does under load: transactions of 20
// entries to 16 destinations, acknowledgements collected after each.
func BenchmarkOutbox(b *testing.B) {
	subjects := make([]string, 16)
	for i := range subjects {
		subjects[i] = fmt.Sprint("tally.delta.post.", i)
	}
	o := NewOutbox(ackedPub{}, OutboxOptions{})
	txn := make([]delivery.OutboxEntry, 20)
	data := make([]byte, 1000)
	b.ReportAllocs()
	var seq uint64
	for i := 0; i < b.N; i += len(txn) {
		for j := range txn {
			seq++
			txn[j] = delivery.OutboxEntry{Seq: seq, Subject: subjects[j%len(subjects)], MsgID: "m", Data: data}
		}
		if err := o.Send(b.Context(), txn); err != nil {
			b.Fatal(err)
		}
		if err := o.Reap(b.Context(), false); err != nil {
			b.Fatal(err)
		}
		o.Published()
	}
}
