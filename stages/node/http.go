package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/tally-dev/tally/stages/metrics"
)

// serveHTTP serves, on addr:
//
//   - /metrics: Prometheus metrics (see stages/metrics);
//   - /livez: 200 while the process runs, 503 once a partition failed and it is stopping;
//   - /readyz: 200 while every partition of this process is loaded and within
//     --max-lag, 503 with the health reply (or the reason it cannot be told) otherwise;
//   - /healthz: the same as /readyz, for the probes configured before /readyz existed;
//   - /debug/pprof/: Go's profiles (heap, goroutines, CPU, execution trace), only with
//     Config.Pprof.
func (n *Node) serveHTTP(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot serve metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", n.metrics.Handler())
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-n.failed:
			http.Error(w, "a partition failed; stopping", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	mux.HandleFunc("/readyz", n.readyz)
	mux.HandleFunc("/healthz", n.readyz)
	if n.cfg.Pprof {
		// Off unless asked: a CPU profile or trace costs CPU while it runs, and the heap
		// profile and command line tell more about the process than metrics do. The
		// package also registers these on http.DefaultServeMux, which tallyd never serves.
		mux.HandleFunc("/debug/pprof/", pprof.Index) // heap, allocs, goroutine, block, mutex…
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	n.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	n.wg.Go(func() { _ = n.http.Serve(ln) })
	n.metricsAddr = ln.Addr().String()
	n.log.Info("metrics", "addr", n.metricsAddr)
	return nil
}

// readyz answers whether this process is ready (see serveHTTP), with its health reply.
func (n *Node) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	h, err := n.query.Health(ctx)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if !h.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(h)
}

// streams is how full each stream of the prefix is, for the metrics.
func (n *Node) streams(ctx context.Context) []metrics.Stream {
	names := []string{n.subjects.EventsStream(), n.subjects.DeltasStream(), n.subjects.ChangesStream(), n.subjects.DLQStream(), n.subjects.LogStream()}
	out := make([]metrics.Stream, len(names))
	for i, name := range names {
		out[i].Name = name
		st, err := n.js.Stream(ctx, name)
		if err != nil {
			out[i].Err = err
			continue
		}
		info := st.CachedInfo()
		out[i].Bytes, out[i].MaxBytes = info.State.Bytes, info.Config.MaxBytes
	}
	return out
}

// lags is what the metrics show of each partition's lag.
func (n *Node) lags(ctx context.Context) []metrics.Lag {
	ls := n.query.Lags(ctx)
	out := make([]metrics.Lag, len(ls))
	for i, l := range ls {
		out[i] = metrics.Lag{Stage: l.Stage, Family: l.Family, Partition: l.Partition, Msgs: l.Msgs, Age: l.Age,
			Ready: l.Ready(n.cfg.MaxLag), Err: l.Err}
	}
	return out
}
