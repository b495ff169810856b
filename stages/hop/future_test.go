package hop

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// future is a jetstream.PubAckFuture a test settles.
type future struct {
	msg *nats.Msg
	ok  chan *jetstream.PubAck
	err chan error
}

func newFuture(msg *nats.Msg) *future {
	return &future{msg: msg, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
}

func (u *future) Ok() <-chan *jetstream.PubAck { return u.ok }
func (u *future) Err() <-chan error            { return u.err }
func (u *future) Msg() *nats.Msg               { return u.msg }
