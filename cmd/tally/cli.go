package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/buildinfo"
	"github.com/tally-dev/tally/pipeline/natsconn"
)

// env is the process's outside world, so that run can be tested in-process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// nc is the connection the command's client uses, for commands that print raw replies.
	nc *nats.Conn
}

const usage = `tally — Tally's command-line client

  tally pub [file]                         publish NDJSON events (stdin without a file)
  tally get [--json] [--exact] [--window 5m|1h|1d] <family> <id>...
                                           counts of ids (--json: the raw reply); exit 1 if
                                           any is unavailable (partition hand-over); ids
                                           a standby counted while their partition had no
                                           owner are marked stale (--exact: unavailable);
                                           --window: the net change over it
  tally top [--window 5m|1h|1d] [--limit N] [--watch D] <family> <field>
                                           trending: the N ids (10) whose field changed
                                           most over the window (1h), exact; --watch:
                                           printed each time tallyd pushes a change,
                                           the watch asked again every D
  tally liked <uid> <post>...              did uid like these posts
  tally likes user <uid> | post <post>     who liked / what was liked, newest first
  tally following <uid> | followers <uid>  follow lists, newest first
  tally unread <uid>...                    unread counts
  tally watch <family>                     print change events until Ctrl-C
  tally health                             print the health reply; exit 1 unless ready (within tallyd's --max-lag)
  tally audit post <id>... | user <id>...  recount likes, comments, followers, following
        [--sample N] [--repair]            from the relations; exit 1 if any counter drifted
  tally bench                              load benchmark with exact-count check
  tally version                            print the version this CLI was built as

Common flags (before or after the command, and among its own):
  --server URL   NATS URL (NATS_URL; default the context's, else nats://127.0.0.1:4222)
  --context C    nats CLI context, a name or a JSON file (NATS_CONTEXT): URL, credentials, TLS
  --creds F      user credentials file (NATS_CREDS)     --nkey F   nkey seed file (NATS_NKEY)
  --tls-cert F --tls-key F   client certificate (NATS_CERT, NATS_KEY)
  --tls-ca F     CAs the server's certificate must chain to (NATS_CA)
  --inbox-prefix P  reply subjects under P instead of _INBOX (where each user has its own)
  --prefix P     subject prefix (default tally)
  --timeout D    request timeout (default 5s)
Run "tally <command> -h" for a command's flags.
`

type command struct {
	name  string
	flags func(fs *flag.FlagSet) // the command's own flags
	run   func(ctx context.Context, c *client.Client, fs *flag.FlagSet, e env) error
}

func commands() []command {
	return []command{
		{"pub", pubFlags, runPub},
		{"get", getFlags, runGet},
		{"top", topFlags, runTop},
		{"liked", nil, runLiked},
		{"likes", listFlags, runLikes},
		{"following", listFlags, runFollowList(client.Following)},
		{"followers", listFlags, runFollowList(client.Followers)},
		{"unread", nil, runUnread},
		{"watch", nil, runWatch},
		{"health", nil, runHealth},
		{"audit", auditFlags, runAudit},
		{"bench", benchFlags, runBench},
	}
}

// run executes one command line and returns the exit code.
func run(ctx context.Context, args []string, e env) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(e.stdout, usage)
		return 0
	}
	if args[0] == "--version" {
		args = []string{"version"}
	}
	fs := flag.NewFlagSet("tally", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	server := fs.String("server", e.getenv("NATS_URL"), "NATS URL (default: the context's, else "+nats.DefaultURL+")")
	// The variables the nats CLI reads, so that one environment serves both.
	auth := natsconn.Auth{Context: e.getenv("NATS_CONTEXT"), Creds: e.getenv("NATS_CREDS"), NKey: e.getenv("NATS_NKEY"),
		TLSCert: e.getenv("NATS_CERT"), TLSKey: e.getenv("NATS_KEY"), TLSCA: e.getenv("NATS_CA")}
	auth.Flags(fs)
	prefix := fs.String("prefix", pipeline.DefaultPrefix, "subject prefix")
	timeout := fs.Duration("timeout", 5*time.Second, "request timeout")
	// The common flags may come before the command as well as after it.
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(e.stderr, "tally: no command\n\n%s", usage)
		return 2
	}
	name := fs.Arg(0)
	if name == "version" { // needs no NATS
		fmt.Fprintln(e.stdout, buildinfo.Read().String("tally"))
		return 0
	}
	var cmd *command
	for _, c := range commands() {
		if c.name == name {
			cmd = &c
		}
	}
	if cmd == nil {
		fmt.Fprintf(e.stderr, "tally: unknown command %q\n\n%s", name, usage)
		return 2
	}
	fs.Init("tally "+cmd.name, flag.ContinueOnError)
	if cmd.flags != nil {
		cmd.flags(fs)
	}
	if err := parseInterspersed(fs, fs.Args()[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	nc, err := auth.Connect(*server, nats.DefaultURL, nats.Name("tally-cli"))
	if err != nil {
		fmt.Fprintf(e.stderr, "tally: %v (is tallyd running?)\n", err)
		return 1
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithPrefix(*prefix), client.WithTimeout(*timeout))
	if err != nil {
		fmt.Fprintln(e.stderr, "tally:", err)
		return 1
	}
	e.nc = nc
	if err := cmd.run(ctx, c, fs, e); err != nil {
		fmt.Fprintf(e.stderr, "tally %s: %v\n", cmd.name, err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

// parseInterspersed parses flags wherever they stand among the arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) error {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return fs.Parse(append([]string{"--"}, rest...))
}

// ids parses decimal ids.
func ids(args []string) ([]uint64, error) {
	out := make([]uint64, len(args))
	for i, a := range args {
		id, err := pipeline.ParseID(a)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		out[i] = uint64(id)
	}
	return out, nil
}

func needArgs(fs *flag.FlagSet, min int, what string) error {
	if fs.NArg() < min {
		return fmt.Errorf("%w: need %s", errUsage, what)
	}
	return nil
}

func tabRow(cells ...string) string { return strings.Join(cells, "\t") + "\n" }
