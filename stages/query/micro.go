package query

import (
	"fmt"
	"strings"
	"time"

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
// subscriptions of each subject before. Each request is answered by an answerer, a
// goroutine that then waits for the next (at most maxAnswering of them; past that on the
// instance's own goroutine, as before). The instance waits for the answer up to handOff
// and sends it through micro, which counts it; past that it goes on to the next request,
// leaving the answer to be sent by a goroutine of its own.
// So a request waiting out a hand-over (an exact get of a killed owner's partition waits
// up to HandOver, 2 s) holds up no other: queued behind one, a plain get that a standby
// could answer at once timed out at a client's 2 s (TestKillReadsStale failed 2 runs in
// 3; TestWaitingGetHoldsUpNoOther). Micro's stats time such a slow answer as handOff
// and do not count its error; tally_query_seconds times every answer. Micro's own work per request is a
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

// endpoint answers kind's requests, each on an answerer (see the top of this file). A
// failed one carries the Nats-Service-Error headers with the HTTP-like status of its
// code, and is counted in micro's stats when answered within handOff; its body is the
// same error reply as ever.
func (s *Server) endpoint(kind string, h func(*request) (any, error)) micro.Handler {
	return micro.HandlerFunc(func(r micro.Request) {
		m := &nats.Msg{Subject: r.Subject(), Reply: r.Reply(), Data: r.Data(), Header: nats.Header(r.Headers())}
		if m.Reply == "" {
			return // a publish, not a request: there is no one to answer
		}
		j := &job{kind: kind, h: h, m: m, done: make(chan answer, 1)}
		s.inFlight.Add(1) // until answered, for Stop
		defer s.inFlight.Add(-1)
		if !s.hand(j) { // as many answers under way as allowed: this one on the instance
			respond(r, s.answer(kind, h, m, false))
			return
		}
		t := time.NewTimer(handOff)
		defer t.Stop()
		select {
		case a := <-j.done:
			respond(r, a)
		case <-t.C: // slow: sent past micro, whose request is done with once this returns
			s.inFlight.Add(1)
			go func() {
				defer s.inFlight.Add(-1)
				a := <-j.done
				if a.code != "" {
					a.hdr = setError(a.hdr, a.code, a.failure)
				}
				_ = s.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Data: a.data, Header: a.hdr})
			}()
		}
	})
}

// respond sends a through micro: a failed one is also reported to micro (counted in its
// stats, and the Nats-Service-Error headers set).
func respond(r micro.Request, a answer) {
	opts := []micro.RespondOpt{micro.WithHeaders(micro.Headers(a.hdr))}
	if a.code == "" {
		_ = r.Respond(a.data, opts...)
		return
	}
	_ = r.Error(serviceStatus(a.code), errorDescription(a.failure), a.data, opts...)
}

// setError sets on hdr the headers micro's Error sets.
func setError(hdr nats.Header, code, failure string) nats.Header {
	if hdr == nil {
		hdr = nats.Header{}
	}
	hdr.Set(micro.ErrorHeader, errorDescription(failure))
	hdr.Set(micro.ErrorCodeHeader, serviceStatus(code))
	return hdr
}

// job is a request handed to an answerer: an endpoint's, whose answer goes to done (see
// endpoint), or another process's (peer, done nil), which the answerer sends itself
// (see finish).
type job struct {
	kind string
	h    func(*request) (any, error)
	m    *nats.Msg
	done chan answer
	peer bool
}

// hand hands j to an idle answerer, or to a new one while fewer than maxAnswering answer;
// false when as many do, and the caller answers j itself.
func (s *Server) hand(j *job) bool {
	select {
	case s.jobs <- j:
		return true
	default:
	}
	if s.answerers.Add(1) > maxAnswering {
		s.answerers.Add(-1)
		return false
	}
	go s.answerer(j)
	return true
}

// handOver hands j, a request on a plain subscription (another process's, or a
// client's of this process's own partitions), to an answerer, which answers it (see
// finish): the subscription goes on to the next request meanwhile. A publish, with no
// one to answer, is dropped.
func (s *Server) handOver(j *job) {
	if j.m.Reply == "" {
		return
	}
	s.inFlight.Add(1) // until answered, for Stop
	if !s.hand(j) {
		s.finish(j, s.answer(j.kind, j.h, j.m, j.peer))
	}
}

// finish sends a, the answer of j: to done for an endpoint's, to the asker for another
// process's request, which its handler counted in flight (see handOver).
func (s *Server) finish(j *job, a answer) {
	if j.done != nil {
		j.done <- a
		return
	}
	_ = j.m.RespondMsg(&nats.Msg{Subject: j.m.Reply, Data: a.data, Header: a.hdr})
	s.inFlight.Add(-1)
}

// answerer answers j, then the jobs handed to it, until none comes for answererIdle.
// The answerers a burst of requests started stay for the next ones, with the stacks an
// answer grows: a goroutine started for each request grew its stack in each (3 % of a
// 20-id get's CPU, BenchmarkGet20).
func (s *Server) answerer(j *job) {
	defer s.answerers.Add(-1)
	idle := time.NewTimer(answererIdle)
	defer idle.Stop()
	for {
		s.finish(j, s.answer(j.kind, j.h, j.m, j.peer))
		idle.Reset(answererIdle)
		select {
		case j = <-s.jobs:
		case <-idle.C:
			return
		}
	}
}

func errorDescription(failure string) string { return strings.ReplaceAll(failure, "\n", "; ") }

const (
	// maxAnswering is how many requests a process answers at once on answerers (see
	// endpoint).
	maxAnswering = 256
	// answererIdle is how long an answerer waits for a request before it ends.
	answererIdle = 10 * time.Second
	// handOff is how long an instance of the service waits for an answer before it
	// goes on to the next request (see endpoint).
	handOff = 50 * time.Millisecond
)

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
