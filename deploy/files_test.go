package deploy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
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
		if o.JetStreamLimits.DefaultMaxConsumers != -1 { // six readers a partition on the deltas
			t.Errorf("%s: default_max_consumers %d, want -1 (nats-server's default caps a stream at 1 000)", f, o.JetStreamLimits.DefaultMaxConsumers)
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

	served := servedMetrics(t)
	used := map[string]bool{}
	name := regexp.MustCompile(`\b(?:tally|go|process)_[a-z_]+\b`)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				base := baseName(served, n)
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

// baseName is the metric family of a series name: a histogram's _bucket, _sum and
// _count are its own.
func baseName(served map[string]string, n string) string {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(n, suf); ok && served[b] == "histogram" {
			return b
		}
	}
	return n
}

// servedMetrics returns the metric families a real metrics registry serves, by type.
func servedMetrics(t *testing.T) map[string]string {
	t.Helper()
	m := metrics.New(metrics.Source{
		Events: event.NewStats(), StandbyEvents: event.NewStats(), Counters: &counter.Stats{},
		Lags: func(context.Context) []metrics.Lag {
			return []metrics.Lag{{Stage: "event", Msgs: 1}}
		},
		Hot:        func() map[string][2]int64 { return map[string][2]int64{"post": {1, 13}} },
		StandbyLag: func(context.Context) (uint64, error) { return 0, nil },
		Streams: func(context.Context) []metrics.Stream {
			return []metrics.Stream{{Name: "TALLY_EVENTS", Bytes: 1, MaxBytes: -1}}
		},
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
	return served
}

// TestAlerts checks that every metric the alerting rules name is one tallyd serves, or
// one prometheus-nats-exporter makes of a real nats-server's /varz, that every job they
// name is scraped, that Prometheus loads them, and that the alerts an operator needs are
// there.
func TestAlerts(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	prom, err := os.ReadFile(filepath.Join("prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^rule_files:\n  - alerts.yml$`).Match(prom) {
		t.Error("prometheus.yml does not load alerts.yml")
	}
	served, varz := servedMetrics(t), varzMetrics(t)
	alerts := map[string]bool{}
	var alert string
	name := regexp.MustCompile(`\b(tally|gnatsd)_[a-z_]+\b`)
	job := regexp.MustCompile(`\bup\{job="([a-z]+)"\}`)
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if a, ok := strings.CutPrefix(line, "- alert: "); ok {
			alert = a
			alerts[a] = true
		}
		expr, ok := strings.CutPrefix(line, "expr: ")
		if !ok {
			continue
		}
		names, jobs := name.FindAllString(expr, -1), job.FindAllStringSubmatch(expr, -1)
		if len(names) == 0 && len(jobs) == 0 {
			t.Errorf("alert %s: %q names no metric of tallyd or NATS", alert, expr)
		}
		for _, n := range names {
			if strings.HasPrefix(n, "gnatsd_") && !varz[n] || strings.HasPrefix(n, "tally_") && served[baseName(served, n)] == "" {
				t.Errorf("alert %s uses %s, which neither tallyd nor the NATS exporter serves", alert, n)
			}
		}
		for _, j := range jobs {
			if !strings.Contains(string(prom), "- job_name: "+j[1]+"\n") {
				t.Errorf("alert %s: prometheus.yml scrapes no job %s", alert, j[1])
			}
		}
	}
	for _, want := range []string{"TallyDown", "TallyAllDown", "TallyNotReady", "TallyLagging", "TallyLagLookupsFailing", "TallyDeadLetters", "TallyBackupErrors",
		"TallyPartitionsUnowned", "TallyHopGapsSkipped", "TallyAuditDrift", "TallyStreamNearFull", "NatsDown", "NatsJetStreamStorageNearLimit"} {
		if !alerts[want] {
			t.Errorf("alerts.yml has no %s", want)
		}
	}
	compose, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"1", "2", "3"} {
		if !strings.Contains(string(compose), "nats-exporter-"+n+":") || !strings.Contains(string(compose), `network_mode: "service:nats-`+n+`"`) ||
			!strings.Contains(string(prom), `"nats-`+n+`:7777"`) {
			t.Errorf("NATS node %s has no exporter in its network scraped by prometheus.yml", n)
		}
	}
	if !strings.Contains(string(compose), `command: ["-varz", "-jsz=all", "-port", "7777", "http://127.0.0.1:8222"]`) {
		t.Error("the NATS exporters do not read /varz on the node's monitoring port")
	}
}

// varzMetrics returns the gauges prometheus-nats-exporter -varz makes of a real
// nats-server's /varz (with JetStream): gnatsd_varz_ and the path of every number in
// it, joined by _ (jetstream.stats.storage is gnatsd_varz_jetstream_stats_storage).
func varzMetrics(t *testing.T) map[string]bool {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, HTTPHost: "127.0.0.1", HTTPPort: -1,
		JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	resp, err := http.Get("http://" + s.MonitorAddr().String() + "/varz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case float64:
			out[prefix] = true
		case map[string]any:
			for k, x := range v {
				walk(prefix+"_"+k, x)
			}
		}
	}
	walk("gnatsd_varz", v)
	if !out["gnatsd_varz_connections"] {
		t.Fatalf("/varz read wrong: %v", v)
	}
	return out
}

// TestCompose checks what compose.yaml promises: the NATS image the tests run, each
// container's own readiness as its health check, ports on the host's loopback only,
// every secret the NATS configs read passed in, tallyd on its own inbox prefix.
func TestCompose(t *testing.T) {
	data, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	compose := string(data)
	mod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`github.com/nats-io/nats-server/v2 v(\d+\.\d+\.\d+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod names no nats-server")
	}
	if want := "image: nats:" + string(m[1]) + "-alpine"; !strings.Contains(compose, want) {
		t.Errorf("compose.yaml does not run %s, the nats-server the tests run", want)
	}
	if images := regexp.MustCompile(`image: nats:\S+`).FindAllString(compose, -1); len(images) != 1 {
		t.Errorf("nats images: %v, want one", images)
	}
	if !strings.Contains(compose, `test: ["CMD", "/usr/local/bin/probe", "http://127.0.0.1:9464/readyz"]`) {
		t.Error("the tallyd health check is not the container's own /readyz")
	}
	if strings.Contains(compose, "tally\", \"health") {
		t.Error("a health check asks the whole prefix's health")
	}
	for _, p := range regexp.MustCompile(`ports: \[(.*)\]`).FindAllStringSubmatch(compose, -1) {
		for _, port := range strings.Split(p[1], ",") {
			if port = strings.Trim(strings.TrimSpace(port), `"`); !strings.HasPrefix(port, "127.0.0.1:") {
				t.Errorf("port %s is published on every interface of the host", port)
			}
		}
	}
	for _, p := range regexp.MustCompile(`ports: \[(.*)\]`).FindAllStringSubmatch(compose, -1) {
		if strings.Contains(p[1], ":8222") || strings.Contains(p[1], ":6222") {
			t.Errorf("NATS monitoring or routes published on the host: %s", p[0])
		}
	}
	for _, env := range []string{"NATS_ROUTE_PASSWORD", "NATS_ROUTE_1", "NATS_ROUTE_2", "NATS_ROUTE_3"} {
		if !strings.Contains(compose, "    "+env+": ") {
			t.Errorf("compose.yaml does not pass %s to the NATS nodes", env)
		}
	}
	for _, env := range users {
		if !strings.Contains(compose, "    "+env+": ${"+env+":?") {
			t.Errorf("compose.yaml does not require %s", env)
		}
	}
	if !strings.Contains(compose, "TALLY_INBOX_PREFIX: _INBOX_tallyd") {
		t.Error("tallyd does not use its own inbox prefix")
	}
	docker, err := os.ReadFile("Dockerfile")
	if err != nil || !strings.Contains(string(docker), `HEALTHCHECK`) || !strings.Contains(string(docker), "./deploy/probe") {
		t.Errorf("the Dockerfile builds no probe or has no HEALTHCHECK (%v)", err)
	}
	// The image has no VCS information: the version is linked in, or it reports "(devel)".
	if n := strings.Count(string(docker), "-X github.com/tally-dev/tally/pipeline/buildinfo.version=${VERSION}"); n != 2 || !strings.Contains(string(docker), "ARG VERSION") {
		t.Errorf("the Dockerfile links the version into %d of tallyd and tally, want both", n)
	}
	if !strings.Contains(compose, `args: { VERSION: "${TALLY_VERSION:-dev}" }`) {
		t.Error("compose.yaml passes no VERSION to the image build")
	}
}

// TestDockerignore: the build context (the repository root) leaves out deploy/.env and
// other secrets and local state, and keeps what the build needs.
func TestDockerignore(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	// ignored follows Docker's rules for the patterns used here: a path is matched
	// whole, "**/" matches any leading directories, and a directory takes what is in it.
	ignored := func(p string) bool {
		for _, pat := range patterns {
			for dir := p; dir != "."; dir = filepath.Dir(dir) {
				if ok, _ := filepath.Match(pat, dir); ok {
					return true
				}
				if rest, ok := strings.CutPrefix(pat, "**/"); ok {
					if ok, _ := filepath.Match(rest, filepath.Base(dir)); ok {
						return true
					}
				}
			}
		}
		return false
	}
	for _, p := range []string{"deploy/.env", ".env", ".git/config", "deploy/nats/tls/ca-key.pem", "deploy/nats/tls/server.pem", "data/state/MANIFEST", "alice.creds", "deploy/systemd/tallyd.env"} {
		if !ignored(p) {
			t.Errorf("%s goes into the build context", p)
		}
	}
	for _, p := range []string{"go.mod", "go.sum", "cmd/tallyd/main.go", "deploy/probe/main.go", "deploy/env.example", "pipeline/natstest/tls.go", "testdata/x"} {
		if ignored(p) {
			t.Errorf("%s is left out of the build context, which needs it", p)
		}
	}
}

// TestSystemdUnit: a configuration error (exit 2, see cmd/tallyd) is not restarted in a
// loop, while any other failure is.
func TestSystemdUnit(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("systemd", "tallyd.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Restart=on-failure", "RestartPreventExitStatus=2"} {
		if !regexp.MustCompile(`(?m)^` + want + `$`).Match(data) {
			t.Errorf("tallyd.service has no %s", want)
		}
	}
}

// TestSingleConfig loads nats-single.conf, the one server beside a tallyd, as
// nats-server would.
func TestSingleConfig(t *testing.T) {
	o, err := server.ProcessConfigFile("nats-single.conf")
	if err != nil {
		t.Fatal(err)
	}
	if !o.JetStream || o.MaxPayload < 8<<20 || o.JetStreamLimits.DefaultMaxConsumers != -1 {
		t.Errorf("jetstream %v, max_payload %d, default_max_consumers %d; want JetStream, at least 8 MiB and -1 (no cap on a stream's consumers)",
			o.JetStream, o.MaxPayload, o.JetStreamLimits.DefaultMaxConsumers)
	}
}
