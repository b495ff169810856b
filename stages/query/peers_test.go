package query

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/tally-dev/tally/pipeline"
)

// TestPeersTable: what a process learns of where partitions are served — a token learned
// per family and partition, never its own nor one that is not a subject token, forgotten
// only while it is still the one learned; a silent process forgotten everywhere and not
// learned again for peerQuiet, its silence then dropped.
func TestPeersTable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := newPeers(pipeline.DefaultFamilies(), 4)
		at := func(family string, p int, want string) {
			t.Helper()
			if got := ps.at(family, p); got != want {
				t.Fatalf("%s/%d at %q, want %q", family, p, got, want)
			}
		}
		ps.learn("post", 1, "a")
		ps.learn("post", 2, ps.token) // its own
		ps.learn("post", 3, "x.y")    // not one token
		ps.learn("user", 3, "")       // an older process's reply
		at("post", 1, "a")
		at("user", 1, "")
		at("post", 2, "")
		at("post", 3, "")
		at("user", 3, "")
		ps.forget("post", 1, "b") // learned since to be another's: kept
		at("post", 1, "a")
		ps.forget("post", 1, "a")
		at("post", 1, "")

		ps.learn("post", 1, "a")
		ps.learn(evPeers, 3, "a")
		ps.learn("user", 0, "b")
		ps.hush("a")
		at("post", 1, "")
		at(evPeers, 3, "")
		at("user", 0, "b")
		ps.learn("post", 1, "a") // still silent
		at("post", 1, "")
		time.Sleep(peerQuiet + time.Second)
		ps.learn("post", 1, "a")
		at("post", 1, "a")

		ps.hush("b")
		time.Sleep(peerQuiet + time.Second)
		ps.hush("c") // b's silence is past: dropped (pipeline's TestHushDropsPastSilences)
		if ps.silent.Quiet("b") || !ps.silent.Quiet("c") {
			t.Errorf("b quiet %v, c quiet %v: want only c's silence", ps.silent.Quiet("b"), ps.silent.Quiet("c"))
		}
	})
}
