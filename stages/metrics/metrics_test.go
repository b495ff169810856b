package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/stages/counter"
	"github.com/tally-dev/tally/stages/event"
	"github.com/tally-dev/tally/stages/metrics"
)

func scrape(t *testing.T, m *metrics.Metrics) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

// TestLagSeries: every partition has a lag series, 0 included, labelled by stage,
// family and partition; a lag NATS does not answer is counted and the scrape still
// succeeds.
func TestLagSeries(t *testing.T) {
	fail := false
	m := metrics.New(metrics.Source{Events: event.NewStats(), Counters: &counter.Stats{}, Version: "v1.2.3",
		Lags: func(context.Context) []metrics.Lag {
			ls := []metrics.Lag{
				{Stage: "event", Partition: 0, Ready: true},
				{Stage: "counter", Family: "post", Partition: 1, Msgs: 7, Age: 1500 * time.Millisecond, Ready: true},
				{Stage: "counter", Family: "user", Partition: 1, Ready: true},
			}
			if fail {
				ls[2].Err = errors.New("nats: timeout")
			}
			return ls
		}})
	code, body := scrape(t, m)
	for _, want := range []string{
		`tally_partition_lag{family="",partition="0",stage="event"} 0`,
		`tally_partition_lag{family="post",partition="1",stage="counter"} 7`,
		`tally_partition_lag{family="user",partition="1",stage="counter"} 0`,
		`tally_partition_lag_seconds{family="post",partition="1",stage="counter"} 1.5`,
		`tally_caught_up 0`,
		`tally_ready 1`,
		`tally_lag_lookup_errors_total 0`,
		`tally_build_info{go="` + runtime.Version() + `",modified="",revision="",version="v1.2.3"} 1`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("(%d) lacks %s", code, want)
		}
	}
	fail = true
	for i := range 2 {
		code, body = scrape(t, m)
		if code != 200 || !strings.Contains(body, `tally_partition_lag{family="post",partition="1",stage="counter"} 7`) ||
			strings.Contains(body, `family="user"`) || !strings.Contains(body, "tally_ready 0") ||
			!strings.Contains(body, "tally_lag_lookup_errors_total "+string(rune('1'+i))) {
			t.Errorf("scrape %d with a failed lookup = %d:\n%s", i, code, grepLines(body, "tally_"))
		}
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The process's NATS connections: how many it holds, and how often one was lost.
func TestNATSSeries(t *testing.T) {
	m := metrics.New(metrics.Source{Events: event.NewStats(), Counters: &counter.Stats{},
		NATS: func() (int64, int) { return 5, 19 }})
	code, body := scrape(t, m)
	for _, want := range []string{"tally_nats_disconnects_total 5", "tally_nats_connections 19"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("(%d) lacks %s:\n%s", code, want, grepLines(body, "tally_nats"))
		}
	}
}
