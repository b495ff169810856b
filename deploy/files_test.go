package deploy

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tally-dev/tally/stages/counter"
	"github.com/tally-dev/tally/stages/event"
	"github.com/tally-dev/tally/stages/metrics"
)

// TestClusterConfigs loads nats-1.conf, nats-2.conf and nats-3.conf as nats-server would
// (with cluster.conf and accounts.conf included) and checks what the cluster relies on.
func TestClusterConfigs(t *testing.T) {
	setPasswords(t)
	names := map[string]bool{}
	for _, f := range []string{"nats-1.conf", "nats-2.conf", "nats-3.conf"} {
		o, err := server.ProcessConfigFile(filepath.Join("nats", f))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		want := strings.TrimSuffix(f, ".conf")
		if o.ServerName != want || names[o.ServerName] {
			t.Errorf("%s: server_name %q, want %q and distinct", f, o.ServerName, want)
		}
		names[o.ServerName] = true
		if !o.JetStream || o.StoreDir != "/data/jetstream" {
			t.Errorf("%s: jetstream %v store_dir %q", f, o.JetStream, o.StoreDir)
		}
		if o.Port != 4222 || o.HTTPPort != 8222 || o.Cluster.Port != 6222 || o.Cluster.Name != "tally" {
			t.Errorf("%s: ports %d/%d/%d cluster %q", f, o.Port, o.Cluster.Port, o.HTTPPort, o.Cluster.Name)
		}
		var routes []string
		for _, r := range o.Routes {
			routes = append(routes, r.Host)
			if pw, _ := r.User.Password(); r.User.Username() != o.Cluster.Username || pw != o.Cluster.Password {
				t.Errorf("%s: route %s does not authenticate as the cluster's route user", f, r.Host)
			}
		}
		// Routes authenticated; monitoring only on the loopback interface.
		if o.Cluster.Username == "" || o.Cluster.Password == "" {
			t.Errorf("%s: routes accepted without authentication", f)
		}
		if o.HTTPHost != "127.0.0.1" {
			t.Errorf("%s: monitoring listens on %q, want 127.0.0.1", f, o.HTTPHost)
		}
		if strings.Join(routes, ",") != "nats-1:6222,nats-2:6222,nats-3:6222" {
			t.Errorf("%s: routes %v", f, routes)
		}
		if o.MaxPayload < 8<<20 {
			t.Errorf("%s: max_payload %d is too small for a batch", f, o.MaxPayload)
		}
		if o.SystemAccount != "SYS" || len(o.Users) != len(users) {
			t.Errorf("%s: system account %q, %d users", f, o.SystemAccount, len(o.Users))
		}
	}
}

// TestDashboard checks that every metric the Grafana dashboard queries is one tallyd
// exposes, and that the dashboard shows each of them that an operator must see.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("grafana", "tally.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("tally.json: %v", err)
	}

	// The names a real metrics registry serves.
	m := metrics.New(metrics.Source{
		Events: event.NewStats(), Counters: &counter.Stats{},
		Lags: func(context.Context) []metrics.Lag {
			return []metrics.Lag{{Stage: "event", Msgs: 1}}
		},
		Hot: func() map[string][2]int64 { return map[string][2]int64{"post": {1, 13}} },
	})
	m.OnQuery("get", time.Millisecond, false)
	m.OnFlush(1, time.Millisecond)
	m.OnSnapshot(0, time.Millisecond)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	served := map[string]string{} // name → type
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[1] == "TYPE" {
			served[f[2]] = f[3]
		}
	}

	used := map[string]bool{}
	name := regexp.MustCompile(`\b(?:tally|go|process)_[a-z_]+\b`)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				base := n
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(n, suf); ok && served[b] == "histogram" {
						base = b
					}
				}
				if served[base] == "" {
					t.Errorf("panel %q queries %s, which tallyd does not serve", p.Title, n)
				}
				used[base] = true
			}
		}
	}
	for n := range served {
		if strings.HasPrefix(n, "tally_") && !used[n] {
			t.Errorf("tallyd serves %s but no panel shows it", n)
		}
	}
}
