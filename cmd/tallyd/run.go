package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/stages/node"
)

// run parses flags (and TALLY_* environment variables) into a node.Config and runs it
// until ctx ends. It returns the exit code: 0 on a clean stop, 1 on failure, 2 on a
// configuration error (bad flags, a Config or stream setting the node refuses), which a
// restart cannot cure: systemd's RestartPreventExitStatus=2 stops there.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, logs, err := parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errVersion) {
		fmt.Fprintln(stderr, version())
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "tallyd:", err)
		return 2
	}
	log := logs.logger(stderr)
	mem, _ := cfg.Mem(os.DirFS("/")) // parse checked it
	if mem.Short() {
		log.Warn("the machine allows this process less memory than it needs: its budget is the least it needs",
			"allowed", node.Bytes(mem.Machine), "max-mem", node.Bytes(mem.Budget))
	}
	cfg.MaxMem = mem.Budget // the node need not read the machine again
	// The limit is the process's, so tallyd sets it, not the node (a test process runs
	// several). GOMEMLIMIT, which the runtime has applied already, wins.
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(mem.GoLimit)
	}
	trimCtx, stopTrim := context.WithCancel(ctx)
	defer stopTrim()
	go node.TrimWhenIdle(trimCtx, 5*time.Second) // the memory a burst leaves, given back once quiet
	if err := node.Run(ctx, cfg, log); err != nil {
		log.Error("tallyd stopped", "err", err)
		if errors.Is(err, node.ErrConfig) {
			return 2
		}
		return 1
	}
	log.Info("tallyd stopped cleanly")
	return 0
}

// parse reads the flags, each of which may also be set by its environment variable
// (setFromEnv); a flag on the command line wins.
func parse(args []string, getenv func(string) string, stderr io.Writer) (node.Config, logConfig, error) {
	cfg := node.DefaultConfig()
	fs := flag.NewFlagSet("tallyd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.DataDir, "data", cfg.DataDir, "data directory: Badger state and the embedded NATS store")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address of the embedded NATS server")
	fs.StringVar(&cfg.NATSURL, "nats", "", "join these NATS servers (comma-separated URLs) instead of embedding one")
	natsFlags(fs, &cfg)
	fs.IntVar(&cfg.Partitions, "partitions", cfg.Partitions, "number of partitions; fixed once the streams exist")
	fs.StringVar(&cfg.Prefix, "prefix", cfg.Prefix, "subject prefix")
	fs.DurationVar(&cfg.FlushInterval, "flush", cfg.FlushInterval, "coalescing window: counters are written and announced at most this often")
	fs.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "replicas of the streams and buckets; 0 keeps an existing one's, and makes a new one with 3 on a NATS cluster of three or more servers, else 1")
	fs.DurationVar(&cfg.DupWindow, "dup-window", cfg.DupWindow, "how long a re-sent Nats-Msg-Id is recognised and dropped; 0 keeps the events stream's (2m when new)")
	fs.BoolVar(&cfg.SyncWrites, "sync", cfg.SyncWrites, "fsync every Badger commit (exact across power loss, slower)")
	fs.StringVar(&cfg.Table, "table", cfg.Table, "in-RAM counter table: hot (packed, ~13 B a post) or map (a Go map, the reference)")
	fs.IntVar(&cfg.FanoutLimit, "fanout-limit", cfg.FanoutLimit, "most followers a post is pushed to; above it readers pull")
	fs.StringVar(&cfg.Metrics, "metrics", "", "serve /metrics and /healthz on this address, e.g. 127.0.0.1:9464")
	fs.BoolVar(&cfg.Pprof, "pprof", cfg.Pprof, "also serve Go's profiles (/debug/pprof/: heap, goroutines, CPU) on the --metrics address")
	fs.DurationVar(&cfg.ColdAge, "cold-age", cfg.ColdAge, "move counters of ids older than this (by snowflake time) from RAM to the cold tier; 0 keeps them")
	fs.Int64Var(&cfg.IDEpoch, "id-epoch", cfg.IDEpoch, "Unix time in ms that an id's snowflake time (id >> 22) counts from")
	fs.Func("max-mem", "memory budget of the process, e.g. 4GiB: shared out between the counter tables, Badger and NATS, and Go's memory limit (see docs/performance.md, Sizing); 0 (the default) is three quarters of the machine's RAM, or of the container's limit", func(v string) error {
		n, err := parseBytes(v)
		cfg.MaxMem = n
		return err
	})
	fs.Func("hot-max-mem", "bound the RAM of the counter tables instead of their share of --max-mem, e.g. 8GiB; above it the least recently used ids move to the cold tier; 0 takes the share", func(v string) error {
		n, err := parseBytes(v)
		cfg.HotMaxMem = n
		return err
	})
	fs.Func("state-mem", "RAM the event partitions keep of the reader states and like records of the users active lately, so that most events read nothing from disk, e.g. 256MiB (default 128MiB); 0 keeps none", func(v string) error {
		n, err := parseBytes(v)
		cfg.StateMem = n
		return err
	})
	fs.IntVar(&cfg.ColdCache, "cold-cache", cfg.ColdCache, "most cold ids whose counters stay in RAM after a read, for the whole process")
	fs.BoolVar(&cfg.Windows, "windows", cfg.Windows, "keep the net change of every counter over the last 5 minutes, hour and day (get with window); turn on only once every tallyd of the prefix runs protocol 1.4")
	fs.BoolVar(&cfg.KeyedEvents, "keyed-events", cfg.KeyedEvents, "store each event under its key's subject as tallyd before protocol 1.8 did (the server then keeps ~330 bytes of RAM per key in the events stream); on only while a tallyd before 1.8 runs with the prefix, which refuses events stored otherwise")
	fs.BoolVar(&cfg.Snapshots, "snapshots", cfg.Snapshots, "keep hot-table snapshots in <data>/snapshots for a fast restart")
	fs.BoolVar(&cfg.Join, "join", cfg.Join, "share the partitions (event stages and counters) with the other tallyd of the prefix and take a share of theirs over when one stops or dies, instead of refusing to start (needs --backup-every)")
	fs.DurationVar(&cfg.BackupEvery, "backup-every", cfg.BackupEvery, "back the state up to the NATS object store <PREFIX>_STATE this often, so partitions can move to another machine; 0 never")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", cfg.LeaseTTL, "how long an ownership lease outlives a dead owner")
	fs.BoolVar(&cfg.Standbys, "standbys", cfg.Standbys, "keep warm copies of partitions other tallyd own (about a share more RAM and CPU), so that taking one over restores nothing; with --backup-every")
	fs.DurationVar(&cfg.AuditEvery, "audit-every", cfg.AuditEvery, "recount the like, comment, follower and following counts of --audit-sample random posts and users from the relations this often (tally_audit_*); 0 never")
	fs.IntVar(&cfg.AuditSample, "audit-sample", cfg.AuditSample, "posts and users one background audit samples")
	fs.Var(&cfg.MaxLag, "max-lag", "ready (/readyz, tally.health) while every partition is within this lag: a duration, the age of its oldest unapplied message (30s), or a number of messages (10000)")
	fs.Usage = func() { usage(fs, stderr) }
	fs.DurationVar(&cfg.EventsMaxAge, "events-max-age", cfg.EventsMaxAge, "keep events this long (the events stream's max age); 0 keeps the stream's as it is (7 days when new, or what nats stream edit set)")
	fs.Func("events-max-bytes", "bound the events stream's size, e.g. 50GiB (the oldest events are dropped above it, consumed or not), or -1 for no bound; 0 (the default) keeps the stream's (none when new, or what nats stream edit set)", func(v string) error {
		if strings.TrimSpace(v) == "-1" {
			cfg.EventsMaxBytes = -1
			return nil
		}
		n, err := parseBytes(v)
		cfg.EventsMaxBytes = n
		return err
	})
	fs.Func("events-compression", "the events stream's storage compression: s2 or none; unset keeps the stream's (none when new)", func(v string) error {
		if v != "s2" && v != "none" {
			return fmt.Errorf("compression %q: s2 or none", v)
		}
		cfg.EventsCompression = v
		return nil
	})
	fs.Func("cold-compression", "how the cold tier (Badger) writes its tables: none (the default) or snappy, which takes ~30 % less disk for more heap to build a table and a block cache to read one (see docs/operations.md)", func(v string) error {
		if v != "none" && v != "snappy" {
			return fmt.Errorf("compression %q: none or snappy", v)
		}
		cfg.ColdCompression = v
		return nil
	})
	fs.Func("families", "a JSON file of counter families beside post, user and unread, [{\"name\": \"video\", \"fields\": [\"play\", \"share\"]}], counted through incr events and tally.get.<family>", func(file string) error {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		cfg.Families, err = pipeline.ReadFamilies(data)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		return nil
	})
	viewers := fs.Bool("viewers", false, "count the distinct users who viewed each post (post.viewers, from views with a uid): 4 more bytes a post in RAM, and the viewers' sketches")
	var logs logConfig
	fs.TextVar(&logs.level, "log-level", slog.LevelInfo, "debug, info, warn or error")
	fs.StringVar(&logs.format, "log-format", "text", "text or json")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := setFromEnv(fs, getenv); err != nil {
		return cfg, logs, err
	}
	if err := fs.Parse(args); err != nil {
		return cfg, logs, err
	}
	if *viewers {
		cfg.Families = pipeline.WithViewers(cfg.Families)
	}
	if *showVersion {
		return cfg, logs, errVersion
	}
	if fs.NArg() > 0 {
		return cfg, logs, fmt.Errorf("unexpected argument %q (flags only; see -h)", fs.Arg(0))
	}
	if logs.format != "text" && logs.format != "json" {
		return cfg, logs, fmt.Errorf("log format %q: text or json", logs.format)
	}
	if cfg.FlushInterval < time.Millisecond {
		return cfg, logs, fmt.Errorf("flush %v is too short (at least 1ms)", cfg.FlushInterval)
	}
	if cfg.Partitions < 1 {
		return cfg, logs, fmt.Errorf("partitions %s: must be at least 1", strconv.Itoa(cfg.Partitions))
	}
	if _, err := cfg.Mem(os.DirFS("/")); err != nil {
		return cfg, logs, fmt.Errorf("max-mem: %w", err)
	}
	return cfg, logs, nil
}

// usage prints every flag but the hidden test-only ones (test-*).
func usage(fs *flag.FlagSet, w io.Writer) {
	shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	shown.SetOutput(w)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.HasPrefix(f.Name, "test-") {
			shown.Var(f.Value, f.Name, f.Usage)
			shown.Lookup(f.Name).DefValue = f.DefValue
		}
	})
	fmt.Fprintf(w, "Usage of %s:\n", fs.Name())
	shown.PrintDefaults()
}

// parseBytes reads a size: a number of bytes with an optional unit, KiB/MiB/GiB/TiB or
// KB/MB/GB/TB (powers of ten).
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mul    int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mul := int64(1)
	num := strings.TrimSpace(s)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mul = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mul
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || v*float64(mul) > 1<<62 {
		return 0, fmt.Errorf("size %q: want bytes like 8GiB, 512MiB or 1000000", s)
	}
	return int64(v * float64(mul)), nil
}
