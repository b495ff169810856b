package node

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// stageJS is the JetStream context event partition p's stage reads and publishes with:
// n.readJS, whose reads Config.HoldEvents holds back when a test sets it.
func (n *Node) stageJS(p int) jetstream.JetStream {
	if n.cfg.HoldEvents == nil {
		return n.readJS
	}
	return heldJS{JetStream: n.readJS, wait: func() { n.cfg.HoldEvents(p) }}
}

// heldJS calls wait before every message an ordered consumer of it delivers: a stage
// reading through it takes nothing while wait blocks, as if its stream held a backlog.
type heldJS struct {
	jetstream.JetStream
	wait func()
}

func (h heldJS) OrderedConsumer(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	c, err := h.JetStream.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, err
	}
	return heldConsumer{Consumer: c, wait: h.wait}, nil
}

type heldConsumer struct {
	jetstream.Consumer
	wait func()
}

func (c heldConsumer) Consume(handler jetstream.MessageHandler, opts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
	return c.Consumer.Consume(func(m jetstream.Msg) { c.wait(); handler(m) }, opts...)
}
