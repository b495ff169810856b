package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
	"github.com/tally-dev/tally/stages/systest/rig"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestReadyUnderSteadyLoad: under a steady load every partition is always a few messages
// behind, and the process stays ready: /readyz and /healthz answer 200 at every probe
// that sees a lag (they answered 503 whenever any lag was above 0).
func TestReadyUnderSteadyLoad(t *testing.T) {
	n, c := rig.StartNode(t, func(c *node.Config) { c.Metrics = "127.0.0.1:0" })
	ctx, cancel := context.WithCancel(context.Background())
	var load sync.WaitGroup
	load.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			evs := make([]pipeline.Event, 50)
			for j := range evs {
				evs[j] = pipeline.Event{Type: "view", Post: pipeline.ID(1 + (i*50+j)%1000)}
			}
			if err := c.PublishBatch(ctx, fmt.Sprint("load-", i), evs); err != nil && ctx.Err() == nil {
				t.Errorf("publish: %v", err)
				return
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	})
	defer func() { cancel(); load.Wait() }()
	// Start returns before every counter partition has loaded its table: ready once.
	rig.Eventually(t, "ready under the load", func() (bool, string) {
		code, body := httpGet(t, "http://"+n.MetricsAddr()+"/readyz")
		return code == 200, body
	})

	lagging := 0
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; lagging < 10; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d probes saw a lag: no steady load", lagging, i)
		}
		path := []string{"/readyz", "/healthz"}[i%2]
		code, body := httpGet(t, "http://"+n.MetricsAddr()+path)
		var h pipeline.HealthReply
		if err := json.Unmarshal([]byte(body), &h); err != nil {
			t.Fatalf("%s = %d %s: %v", path, code, body, err)
		}
		if len(h.Lagging) > 0 {
			lagging++
		}
		if code != 200 || !h.Ready {
			t.Fatalf("%s = %d under a steady load (probe %d): %s", path, code, i, body)
		}
	}
}

// TestMetricsWithoutNATS: when NATS does not answer, /metrics still answers (lags it
// cannot look up are counted in tally_lag_lookup_errors_total) instead of a 500, and
// /readyz says the process is not ready while /livez says it is up; once NATS is back,
// it is ready again. Before NATS went away, every partition had its lag series, 0
// included.
func TestMetricsWithoutNATS(t *testing.T) {
	ns := rig.StartNATS(t)
	n, c := rig.StartNode(t, func(c *node.Config) { c.Metrics = "127.0.0.1:0"; c.NATSURL = ns.URL() })
	rig.WaitCaughtUp(t, c)
	url := "http://" + n.MetricsAddr()
	code, body := httpGet(t, url+"/metrics")
	series := regexp.MustCompile(`(?m)^tally_partition_lag\{family="(\w*)",partition="(\d+)",stage="(\w+)"\} 0$`).FindAllStringSubmatch(body, -1)
	if code != 200 || len(series) != 4+3*4 { // 4 event stages, 3 families × 4 counter partitions
		t.Fatalf("/metrics = %d with %d zero lag series, want 16:\n%s", code, len(series), grep(body, "tally_partition_lag"))
	}
	if !strings.Contains(body, "tally_lag_lookup_errors_total 0") || !strings.Contains(body, "tally_build_info{") || !strings.Contains(body, "tally_ready 1") {
		t.Fatalf("/metrics lacks lookup errors 0, build info or ready 1:\n%s", grep(body, "tally_"))
	}

	streams := strings.Count(body, "tally_stream_bytes{")
	ns.Stop()
	code, body = httpGet(t, url+"/metrics")
	m := regexp.MustCompile(`(?m)^tally_lag_lookup_errors_total (\d+)$`).FindStringSubmatch(body)
	if code != 200 || m == nil || m[1] == "0" || !strings.Contains(body, "tally_events_applied_total") || !strings.Contains(body, "tally_ready 0") {
		t.Fatalf("/metrics without NATS = %d, want 200 with lookup errors counted and ready 0:\n%s", code, grep(body, "tally_"))
	}
	// One lookup each: the 16 partitions' lags, the streams' sizes, the standbys' lag.
	if errs, _ := strconv.Atoi(m[1]); errs > 16+streams+1 {
		t.Errorf("%d lookup errors in one scrape of 16 partitions, %d streams and the standbys", errs, streams)
	}
	if code, body := httpGet(t, url+"/readyz"); code != 503 {
		t.Errorf("/readyz without NATS = %d %s, want 503", code, body)
	}
	if code, body := httpGet(t, url+"/livez"); code != 200 {
		t.Errorf("/livez without NATS = %d %s, want 200", code, body)
	}
	ns.Start()
	rig.Eventually(t, "ready once NATS is back", func() (bool, string) {
		code, body := httpGet(t, url+"/readyz")
		return code == 200, fmt.Sprint(code, body)
	})
}
