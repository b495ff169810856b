package pipeline_test

import (
	"strings"
	"testing"

	"github.com/tally-dev/tally/pipeline"
)

// --families adds families to the built-in ones, which it may repeat but not change.
func TestReadFamilies(t *testing.T) {
	f := func(data, wantErr string, wantNames ...string) {
		t.Helper()
		fams, err := pipeline.ReadFamilies([]byte(data))
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Errorf("%s: err %v, want %q", data, err, wantErr)
			}
			return
		}
		var names []string
		for _, fam := range fams {
			names = append(names, fam.Name)
		}
		if err != nil || strings.Join(names, ",") != strings.Join(wantNames, ",") {
			t.Errorf("%s: %v %v, want %v", data, names, err, wantNames)
		}
	}
	f(`[]`, "", "post", "user", "unread")
	f(`[{"name":"video","fields":["play","share"]}]`, "", "post", "user", "unread", "video")
	f(`[{"name":"post","fields":["like","repost","comment","view"]},{"name":"video","fields":["play"]}]`, "", "post", "user", "unread", "video")
	f(`[{"name":"post","fields":["like","repost","comment","view","viewers"]}]`, "", "post", "user", "unread")
	f(`[{"name":"post","fields":["like"]}]`, "cannot be changed")
	f(`[{"name":"post","fields":["like","repost","comment","view","x"]}]`, "cannot be changed")
	f(`[{"name":"user","fields":["follower","following","post","viewers"]}]`, "cannot be changed")
	f(`[{"name":"post","fields":["like","repost","view","comment"]}]`, "cannot be changed")
	f(`[{"name":"video","fields":[]}]`, "1 to 255 fields")
	f(`[{"name":"video","fields":["a","a"]}]`, "listed twice")
	f(`[{"name":"video","fields":["a"]},{"name":"video","fields":["b"]}]`, "defined twice")
	f(`[{"name":"v","fields":["a"],"kind":"x"}]`, "unknown field")
	f(`{"name":"v"}`, "JSON list")
	f(`[] []`, "trailing")
}

// TestFamiliesWithViewers: the post family counts viewers only when a families file
// lists them after its fields, or WithViewers adds them; the default does not (they cost
// RAM in every post).
func TestFamiliesWithViewers(t *testing.T) {
	fams, err := pipeline.ReadFamilies([]byte(`[{"name":"post","fields":["like","repost","comment","view","viewers"]}]`))
	if err != nil {
		t.Fatal(err)
	}
	has := func(fams pipeline.Families) bool {
		post, _ := fams.Lookup(pipeline.FamilyPost)
		_, err := post.Field(pipeline.FieldViewers)
		return err == nil
	}
	def := pipeline.Families(pipeline.DefaultFamilies())
	if !has(fams) || has(def) || !has(pipeline.WithViewers(def)) || has(def) {
		t.Errorf("viewers: listed %v, default %v, WithViewers %v (and the default after %v)", has(fams), has(def), has(pipeline.WithViewers(def)), has(def))
	}
}

// TypeIndex places each event type where Types has it, and nothing else: the event
// stage counts events by type in an array it indexes.
func TestTypeIndex(t *testing.T) {
	types := pipeline.Types()
	if len(types) != pipeline.NumTypes {
		t.Fatalf("%d types, NumTypes %d", len(types), pipeline.NumTypes)
	}
	for i, typ := range types {
		if got := pipeline.TypeIndex(typ); got != i {
			t.Errorf("TypeIndex(%q) = %d, want %d", typ, got, i)
		}
	}
	for _, typ := range []string{pipeline.TypeNotify, pipeline.TypeFollower, pipeline.TypePush, "", "Like", "likes"} {
		if got := pipeline.TypeIndex(typ); got != -1 || pipeline.ValidType(typ) {
			t.Errorf("TypeIndex(%q) = %d (valid %v), want -1", typ, got, pipeline.ValidType(typ))
		}
	}
}
