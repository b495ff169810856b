package query_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/pipeline"
	"github.com/tally-dev/tally/pipeline/natstest"
)

// TestPeerRequestsSkipUnknownFields: a request from another tallyd (to a partition's
// owner or its standby) with a field this one does not know — one a newer version adds,
// in a rolling upgrade — is answered, in MessagePack and JSON; a client's request with
// the same field is still refused naming it, so that a typo is never dropped. Before,
// the peer's request was a bad request too.
func TestPeerRequestsSkipUnknownFields(t *testing.T) {
	const n = 4
	s := natstest.Start(t)
	client := natstest.Connect(t, s)
	a := startNode(t, s, nil, n, 10*time.Second, 0, 1, 3)
	sb := &memStandby{memPart: memPart{fi: 0, p: 2, n: n}}
	sb.loaded.Store(true)
	a.SetStandby("post", 2, sb)
	ids := idsIn(n)
	in := func(p int) pipeline.ID {
		return ids[slices.IndexFunc(ids, func(id pipeline.ID) bool { return pipeline.PartitionOf(id, n) == p })]
	}
	ask := func(subject string, id pipeline.ID, asJSON bool) pipeline.GetReply {
		t.Helper()
		data, err := pipeline.Marshal(map[string]any{"ids": []pipeline.ID{id}, "added_later": 7}, asJSON)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := client.Request(subject, data, 30*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		var r pipeline.GetReply
		if err := pipeline.UnmarshalReply(msg.Data, asJSON, &r); err != nil {
			t.Fatalf("%s: cannot decode the reply: %v", subject, err)
		}
		return r
	}
	for _, asJSON := range []bool{false, true} {
		id := in(0)
		check(t, ask("tally.part.post.0", id, asJSON), []pipeline.ID{id}, n)
		id = in(2)
		r := ask("tally.standby.post.2", id, asJSON)
		if w := []uint64{want(0, uint64(id), 0) + 1, want(0, uint64(id), 1) + 1, want(0, uint64(id), 2) + 1, want(0, uint64(id), 3) + 1}; r.Error != "" ||
			len(r.Counts) != 1 || !slices.Equal(r.Counts[0], w) || len(r.Stale) != 1 {
			t.Errorf("standby, JSON %v: %+v, want counts %v, stale", asJSON, r, w)
		}
		r = ask("tally.get.post", in(0), asJSON)
		if !strings.Contains(r.Error, `unknown field "added_later"`) {
			t.Errorf("a client's get with an unknown field, JSON %v: %+v, want it refused naming the field", asJSON, r)
		}
	}
}
