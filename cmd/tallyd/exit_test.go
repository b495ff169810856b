package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
	"github.com/tally-dev/tally/stages/cluster"
)

// buildTallyd builds this command into a temporary directory, with ldflags.
func buildTallyd(t *testing.T, ldflags string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds tallyd")
	}
	bin := filepath.Join(t.TempDir(), "tallyd")
	cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// A configuration error exits 2, which systemd's RestartPreventExitStatus=2 does not
// restart (deploy/systemd/tallyd.service); what a restart may cure exits 1.
func TestConfigErrorsExit2(t *testing.T) {
	bin := buildTallyd(t, "")
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	// A stream an operator edited into something Tally cannot run with.
	srv := natstest.Start(t)
	js, _ := jetstream.New(natstest.Connect(t, srv))
	sc := pipeline.DefaultStreamConfig()
	if err := pipeline.Setup(context.Background(), js, sc); err != nil {
		t.Fatal(err)
	}
	st, _ := js.Stream(context.Background(), sc.Subjects.DeltasStream())
	edited := st.CachedInfo().Config
	edited.Discard = jetstream.DiscardNew
	if _, err := js.UpdateStream(context.Background(), edited); err != nil {
		t.Fatal(err)
	}
	// Another tallyd live on the prefix: a restart without --join meets it again.
	other := natstest.Start(t)
	ojs, _ := jetstream.New(natstest.Connect(t, other))
	owners, err := cluster.Open(context.Background(), ojs, cluster.Bucket{Name: sc.Subjects.OwnersBucket()}, t.TempDir(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := owners.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	// An ownership bucket an operator made in memory, where a lease would not survive a
	// NATS restart.
	mem := natstest.Start(t)
	mjs, _ := jetstream.New(natstest.Connect(t, mem))
	if _, err := mjs.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: sc.Subjects.OwnersBucket(),
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	f := func(code int, want string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--data", t.TempDir()}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		got := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			got = exit.ExitCode()
		}
		if got != code || !strings.Contains(out.String(), want) {
			t.Errorf("tallyd %v: exit %d, want %d; output %q, want it to contain %q", args, got, code, out.String(), want)
		}
	}
	f(2, "partitions 0", "--partitions", "0")
	f(2, "unknown table", "--table", "btree", "--listen", "127.0.0.1:-1")
	f(2, "--pprof needs --metrics", "--pprof", "--listen", "127.0.0.1:-1")
	f(2, "listen address", "--listen", "nohost")
	f(2, "backup every must not be negative", "--backup-every", "-1s", "--listen", "127.0.0.1:-1")
	f(2, "lease TTL", "--lease-ttl", "1ms", "--listen", "127.0.0.1:-1")
	f(2, "not a valid subject token", "--families", write("dots.json", `[{"name":"a.b","fields":["x"]}]`))
	f(2, "cannot be changed", "--families", write("post.json", `[{"name":"post","fields":["like"]}]`))
	f(2, "no such file", "--families", filepath.Join(dir, "missing.json"))
	f(2, "discard new, Tally needs old", "--nats", srv.ClientURL())
	f(2, "start this one with --join", "--nats", other.ClientURL(), "--lease-ttl", "1m")
	f(2, "storage Memory, Tally needs File", "--nats", mem.ClientURL())
	f(1, "address already in use", "--listen", busy.Addr().String())
}
