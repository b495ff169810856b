package rig

import (
	"strings"
	"testing"
	"time"
)

// TestParseProc checks the two readers of another process's figures on fixed input.
func TestParseProc(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(`# HELP tally_events_applied_total Events applied by type.
# TYPE tally_events_applied_total counter
tally_events_applied_total{type="like"} 700
tally_events_applied_total{type="view"} 3e+02
tally_owned_partitions 5
tally_odd{a="x y}"} 2 1700000000000
`))
	if err != nil {
		t.Fatal(err)
	}
	if m["tally_events_applied_total"] != 1000 || m["tally_owned_partitions"] != 5 || m["tally_odd"] != 2 {
		t.Fatalf("parsed %v", m)
	}
	d, err := ParseStatCPU([]byte("4242 (tally d) S 1 2 3 4 5 6 7 8 9 10 150 250 0 0 20 0 9 0 100 0 0\n"))
	if err != nil || d != 4*time.Second {
		t.Fatalf("cpu %v, %v; want 4s", d, err)
	}
	d, err = ParseStatCPU(nil)
	if err == nil {
		t.Fatalf("cpu of nothing: %v, want an error", d)
	}
}

// TestTallydProcLogs: what a process wrote to its stderr is read back whole.
func TestTallydProcLogs(t *testing.T) {
	p := &TallydProc{logs: new(LogBuffer)}
	if _, err := p.logs.Write([]byte("one\ntwo\n")); err != nil {
		t.Fatal(err)
	}
	if got := p.Logs(); got != "one\ntwo\n" {
		t.Fatalf("logs %q", got)
	}
	if got := Tail(p.Logs(), 1); got != "two" {
		t.Fatalf("last line %q", got)
	}
}
