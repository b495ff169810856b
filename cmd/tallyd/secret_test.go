package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tally-dev/tally/pipeline/natstest"
)

// lockedBuffer is tallyd's stderr, read by the test while tallyd writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The password of --nats is in no log line and no error, whether tallyd connects or not.
func TestTallydRedactsPasswords(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		Username: "tallyd", Password: "right-pw", NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS did not start")
	}
	t.Cleanup(s.Shutdown)
	addr := strings.TrimPrefix(s.ClientURL(), "nats://")

	var out lockedBuffer
	code := run(context.Background(), []string{"--nats", "nats://tallyd:wrong-pw@" + addr, "--data", t.TempDir()}, noEnv, &out)
	if code != 1 || strings.Contains(out.String(), "wrong-pw") || !strings.Contains(out.String(), "tallyd:xxxxx@") {
		t.Errorf("refused: exit %d, output %q", code, out.String())
	}

	out = lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"--nats", "nats://tallyd:right-pw@" + addr, "--data", t.TempDir(), "--partitions", "2", "--log-level", "debug"}, noEnv, &out)
	}()
	natstest.Eventually(t, time.Minute, "tallyd up", func() (bool, string) {
		return strings.Contains(out.String(), "tally running"), out.String()
	})
	s.DisconnectClientByID(firstClient(t, s)) // a reconnect is logged too
	natstest.Eventually(t, time.Minute, "tallyd reconnected", func() (bool, string) {
		return strings.Contains(out.String(), "NATS reconnected"), out.String()
	})
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d", code)
	}
	if strings.Contains(out.String(), "right-pw") || !strings.Contains(out.String(), "tallyd:xxxxx@") {
		t.Errorf("connected: output %s", out.String())
	}
}

func firstClient(t *testing.T, s *server.Server) uint64 {
	t.Helper()
	cz, err := s.Connz(nil)
	if err != nil || len(cz.Conns) == 0 {
		t.Fatalf("connz: %v %v", cz, err)
	}
	return cz.Conns[0].Cid
}
