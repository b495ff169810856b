package node

import (
	"fmt"
	"time"

	"github.com/tally-dev/tally/pipeline"
)

// Config is everything a Tally process needs; DefaultConfig fills it in.
type Config struct {
	// DataDir holds Badger (DataDir/state) and the embedded NATS store (DataDir/nats).
	DataDir string
	// Listen is the embedded NATS address (host:port); ignored with NATSURL.
	Listen string
	// NATSURL joins existing NATS servers (comma-separated) instead of embedding one.
	NATSURL    string
	Partitions int
	Prefix     string
	Families   []pipeline.Family
	// FlushInterval is the counter workers' coalescing window.
	FlushInterval time.Duration
	Replicas      int
	DupWindow     time.Duration
	// SyncWrites fsyncs every Badger commit (exact across power loss, slower).
	SyncWrites bool
	// Table picks the in-RAM counter table: "map" (a Go map) or "hot" (packed).
	Table string
	// FanoutLimit is the most followers a post is pushed to; posts of authors with more
	// are pulled by their readers (one write per post however many followers).
	FanoutLimit int
	// PurgeEvery is how often each counter partition purges the deltas its checkpoint
	// covers, bounding the deltas stream by what is not yet checkpointed; 0 never purges.
	PurgeEvery time.Duration
	// Metrics is the address of the HTTP server for /metrics (Prometheus) and /healthz;
	// empty disables it.
	Metrics string
}

// DefaultConfig is one process owning 16 partitions with embedded NATS on
// 127.0.0.1:4222 and data in ./data.
func DefaultConfig() Config {
	sc := pipeline.DefaultStreamConfig()
	return Config{
		DataDir:       "data",
		Listen:        "127.0.0.1:4222",
		Partitions:    sc.Partitions,
		Prefix:        pipeline.DefaultPrefix,
		Families:      pipeline.DefaultFamilies(),
		FlushInterval: 100 * time.Millisecond,
		Replicas:      1,
		DupWindow:     sc.DupWindow,
		Table:         "hot",
		FanoutLimit:   10_000,
		PurgeEvery:    time.Minute,
	}
}

func (c Config) validate() error {
	if c.Partitions < 1 || c.Partitions > 1024 {
		return fmt.Errorf("partitions must be 1..1024, not %d", c.Partitions)
	}
	if c.DataDir == "" {
		return fmt.Errorf("a data directory is required")
	}
	if c.FlushInterval <= 0 {
		return fmt.Errorf("flush interval must be positive")
	}
	if _, err := newTable(c.Table); err != nil {
		return err
	}
	return pipeline.Families(c.Families).Validate()
}

func (c Config) streams() pipeline.StreamConfig {
	sc := pipeline.DefaultStreamConfig()
	sc.Subjects = pipeline.NewSubjects(c.Prefix)
	sc.Partitions = c.Partitions
	sc.Replicas = max(c.Replicas, 1)
	if c.DupWindow > 0 {
		sc.DupWindow = c.DupWindow
	}
	return sc
}
