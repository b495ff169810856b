package query

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/tally-dev/tally/pipeline"
)

// The query subjects are served as a NATS micro service, so that the nats CLI's
// `nats micro ls`, `nats micro info tally` and `nats micro stats tally` list each
// tallyd's endpoints, subjects, request counts, errors and processing times. The
// subjects, payloads and queue group stay those of the contract (docs/protocol.md): a client that
// knows nothing of micro sees no difference.
//
// A micro endpoint is one subscription, whose requests are handled one after another;
// a process runs cfg.Workers instances of the service, as it ran that many
// subscriptions of each subject before. Each request is answered on a goroutine of its
// own (up to maxAnswering at once, then on the instance's, which then waits as before),
// so that a request waiting out a hand-over (an exact get of a killed owner's partition
// waits up to HandOver, 2 s) holds up no other: queued behind one, a plain get that a
// standby could answer at once timed out at a client's 2 s (TestKillReadsStale failed 2
// runs in 3; TestWaitingGetHoldsUpNoOther). Micro's stats then time the hand-off, not
// the answer; tally_query_seconds times answers. Micro's own work per request is a
// clock read and a mutex for its stats: BenchmarkGet20, seven alternating runs each
// with and without micro on the shared 2-core machine, had a mean p50 of 143 µs
// against 142 µs (medians 131 and 137), well inside the runs' own spread (±20 %).

// ServiceName is the name of the micro service; its metadata say which prefix.
const ServiceName = "tally"

// services are the running instances of the query service in this process.
type services []micro.Service

// startServices starts cfg.Workers instances of the service, still without endpoints.
func (s *Server) startServices() error {
	for range s.cfg.Workers {
		svc, err := micro.AddService(s.nc, micro.Config{Name: ServiceName, Version: pipeline.ServiceVersion, QueueGroup: QueueGroup,
			Description: "Tally: counts, relations and unread counts",
			Metadata:    map[string]string{"prefix": s.cfg.Subjects.Prefix, "partitions": fmt.Sprint(s.cfg.Partitions)}})
		if err != nil {
			return fmt.Errorf("cannot start the query service: %w", err)
		}
		s.svcs = append(s.svcs, svc)
	}
	return nil
}

// stopServices drains every instance: requests already received are answered.
func (s *Server) stopServices() {
	for _, svc := range s.svcs {
		_ = svc.Stop()
	}
	s.svcs = nil
}

// addEndpoints serves each handler's subject on every instance of the service.
func (s *Server) addEndpoints(handlers map[string]func(*request) (any, error)) error {
	for subj, h := range handlers {
		kind := strings.TrimPrefix(strings.TrimSuffix(subj, ".*"), s.cfg.Subjects.Prefix+".")
		name := strings.ReplaceAll(kind, ".", "_") // an endpoint name has no dots
		for _, svc := range s.svcs {
			if err := svc.AddEndpoint(name, s.endpoint(kind, h), micro.WithEndpointSubject(subj)); err != nil {
				return fmt.Errorf("cannot serve %s: %w", subj, err)
			}
		}
	}
	return nil
}

// endpoint answers kind's requests. A failed one is also reported to micro (counted in
// its stats, and the Nats-Service-Error headers set) with the HTTP-like status of its
// code; its body is the same error reply as ever.
func (s *Server) endpoint(kind string, h func(*request) (any, error)) micro.Handler {
	return micro.HandlerFunc(func(r micro.Request) {
		m := &nats.Msg{Subject: r.Subject(), Reply: r.Reply(), Data: r.Data(), Header: nats.Header(r.Headers())}
		if m.Reply == "" {
			return // a publish, not a request: there is no one to answer
		}
		respond := func() {
			data, hdr, code, failure := s.answer(kind, h, m, false)
			opts := []micro.RespondOpt{micro.WithHeaders(micro.Headers(hdr))}
			if code == "" {
				_ = r.Respond(data, opts...)
				return
			}
			_ = r.Error(serviceStatus(code), strings.ReplaceAll(failure, "\n", "; "), data, opts...)
		}
		select {
		case s.answering <- struct{}{}:
			s.inFlight.Add(1) // before the instance takes the next, for Stop
			go func() {
				defer func() { <-s.answering; s.inFlight.Add(-1) }()
				respond()
			}()
		default: // as many answers under way as allowed: this one on the instance
			respond()
		}
	})
}

// maxAnswering is how many requests a process answers at once on goroutines of their
// own (see endpoint).
const maxAnswering = 256

// serviceStatus is the micro error code of a reply code.
func serviceStatus(code string) string {
	switch code {
	case pipeline.CodeBadRequest:
		return "400"
	case pipeline.CodeUnknownFamily:
		return "404"
	case pipeline.CodeUnavailable:
		return "503"
	}
	return "500"
}
