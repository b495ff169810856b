package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/pipeline"
)

func pubFlags(fs *flag.FlagSet) {
	fs.Int("batch", 1000, "events per batch message (1: one message per event)")
	fs.Bool("skip-bad", false, "report and skip malformed lines instead of stopping")
}

// ndjson reads events one JSON object per line. Blank lines are skipped; a malformed
// line is an error naming it.
type ndjson struct {
	sc   *bufio.Scanner
	line int
	fams pipeline.Families
}

func newNDJSON(r io.Reader) *ndjson {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	return &ndjson{sc: sc, fams: pipeline.DefaultFamilies()}
}

// next returns the next event; io.EOF at the end.
func (n *ndjson) next() (pipeline.Event, error) {
	for n.sc.Scan() {
		n.line++
		b := n.sc.Bytes()
		if len(trimSpace(b)) == 0 {
			continue
		}
		var e pipeline.Event
		if err := pipeline.Unmarshal(b, true, &e); err != nil {
			return e, fmt.Errorf("line %d: %v", n.line, err)
		}
		if e.Type != pipeline.TypeIncr { // incr families are the server's configuration
			if err := e.Validate(n.fams); err != nil {
				return e, fmt.Errorf("line %d: %v", n.line, err)
			}
		} else if e.ID == 0 || e.Family == "" || e.Field == "" || e.N == 0 {
			return e, fmt.Errorf("line %d: incr needs family, id, field and a non-zero n", n.line)
		}
		return e, nil
	}
	if err := n.sc.Err(); err != nil {
		return pipeline.Event{}, fmt.Errorf("line %d: %w", n.line+1, err)
	}
	return pipeline.Event{}, io.EOF
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// runPub publishes NDJSON events. Events without tx get <run>.<line>, so a batch retried
// within this run is counted once; running the command again publishes again.
func runPub(ctx context.Context, c *client.Client, fs *flag.FlagSet, e env) error {
	in := e.stdin
	if fs.NArg() > 1 {
		return fmt.Errorf("%w: one file at most", errUsage)
	}
	if fs.NArg() == 1 && fs.Arg(0) != "-" {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	batch := fs.Lookup("batch").Value.(flag.Getter).Get().(int)
	skip := fs.Lookup("skip-bad").Value.(flag.Getter).Get().(bool)
	if batch < 1 || batch > pipeline.MaxBatch {
		return fmt.Errorf("%w: --batch must be 1..%d", errUsage, pipeline.MaxBatch)
	}
	// --batch 1 sends one message per event; they still go out in chunks, acknowledged
	// together, so that a round trip per event does not set the pace.
	chunkSize := batch
	if batch == 1 {
		chunkSize = 1000
	}
	runID := client.NewTx()
	r := newNDJSON(in)
	var pending []pipeline.Event
	published, skipped, chunk := 0, 0, 0
	start, lastReport := time.Now(), time.Now()
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		var err error
		if batch == 1 {
			err = c.Publish(ctx, pending...)
		} else {
			err = c.PublishBatch(ctx, runID+".b"+strconv.Itoa(chunk), pending)
		}
		if err != nil {
			return fmt.Errorf("after %d events published: %w", published, err)
		}
		chunk++
		published += len(pending)
		pending = pending[:0]
		if time.Since(lastReport) >= time.Second {
			lastReport = time.Now()
			fmt.Fprintf(e.stderr, "published %d events, %.0f/s\n", published, float64(published)/time.Since(start).Seconds())
		}
		return nil
	}
	for {
		ev, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if !skip {
				if ferr := flush(); ferr != nil {
					return ferr
				}
				return fmt.Errorf("%v (%d events before it were published; --skip-bad to go on)", err, published)
			}
			skipped++
			fmt.Fprintln(e.stderr, "skipped", err)
			continue
		}
		if ev.Tx == "" {
			ev.Tx = runID + "." + strconv.Itoa(r.line)
		}
		pending = append(pending, ev)
		if len(pending) >= chunkSize {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	took := time.Since(start)
	fmt.Fprintf(e.stderr, "published %d events in %v, %.0f/s, skipped %d\n", published, took.Round(time.Millisecond), float64(published)/took.Seconds(), skipped)
	return nil
}
