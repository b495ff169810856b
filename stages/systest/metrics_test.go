package systest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

func TestMetricsAndHealthz(t *testing.T) {
	n, c := rig.StartNode(t, func(c *node.Config) { c.Metrics = "127.0.0.1:0" })
	ctx := context.Background()
	var evs []pipeline.Event
	for i := range 30 {
		evs = append(evs, pipeline.Event{Type: "like", UID: pipeline.ID(1 + i), Post: 500})
	}
	evs = append(evs, pipeline.Event{Type: "like", UID: 1, Post: 500}) // changes nothing
	if err := c.PublishBatch(ctx, "m", evs); err != nil {
		t.Fatal(err)
	}
	rig.WaitCaughtUp(t, c)
	if _, err := c.Get(ctx, "post", 500); err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + n.MetricsAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	wants := []string{
		`tally_events_applied_total{type="like"} 31`,
		"tally_events_unchanged_total 1",
		"tally_caught_up 1",
		`tally_hot_ids{family="post"} 1`,
		`tally_query_seconds_count{outcome="ok",query="get"}`,
		"tally_checkpoint_seconds_count",
		"tally_resident_bytes ",
		"tally_resident_hits_total ",
	}
	// Gauges of RAM are refreshed by each partition's flush: poll until all are there.
	rig.Eventually(t, "metrics reflect the events", func() (bool, string) {
		code, body := get("/metrics")
		for _, want := range wants {
			if code != 200 || !strings.Contains(body, want) {
				return false, fmt.Sprintf("(%d) lacks %q:\n%s", code, want, grep(body, "tally_"))
			}
		}
		// The likers' records were read from Badger: none was resident yet.
		if strings.Contains(body, "tally_resident_misses_total 0\n") || !strings.Contains(body, "tally_resident_misses_total ") {
			return false, grep(body, "tally_resident")
		}
		return true, ""
	})
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(path); code != 200 || !strings.Contains(body, `"ok":true`) || !strings.Contains(body, `"ready":true`) {
			t.Fatalf("%s = %d %s", path, code, body)
		}
	}
	if code, body := get("/livez"); code != 200 {
		t.Fatalf("/livez = %d %s", code, body)
	}
}

func grep(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return fmt.Sprint(strings.Join(out, "\n"))
}

// Go's profiles are served on the metrics address only when asked (--pprof): they cost
// CPU while taken and tell a lot about the process.
func TestPprof(t *testing.T) {
	for _, on := range []bool{true, false} {
		n, _ := rig.StartNode(t, func(c *node.Config) { c.Metrics = "127.0.0.1:0"; c.Pprof = on })
		for path, body := range map[string]string{"/debug/pprof/": "goroutine", "/debug/pprof/heap?debug=1": "heap profile",
			"/debug/pprof/goroutine?debug=1": "goroutine profile", "/debug/pprof/cmdline": ""} {
			resp, err := http.Get("http://" + n.MetricsAddr() + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := http.StatusNotFound
			if on {
				want = http.StatusOK
			}
			if resp.StatusCode != want || on && !strings.Contains(string(b), body) {
				t.Errorf("pprof %v: %s = %d, want %d with %q: %.200s", on, path, resp.StatusCode, want, body, b)
			}
		}
	}
}
