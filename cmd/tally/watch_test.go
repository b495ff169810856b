package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/tally-dev/tally/pipeline"
)

// A change event with fewer count rows than ids prints the ids without counts rather
// than indexing past the rows (the loop of runWatch did: an index out of range).
func TestPrintChangeShortCounts(t *testing.T) {
	var out bytes.Buffer
	ch := pipeline.Change{IDs: []pipeline.ID{1, 2}, Fields: []string{"like"}, Counts: [][]uint64{{5}}}
	if err := printChange(json.NewEncoder(&out), ch); err != nil {
		t.Fatal(err)
	}
	if want := "{\"id\":1,\"like\":5}\n{\"id\":2}\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}
