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
	f(`[{"name":"post","fields":["like","repost","comment","view","viewers","x"]}]`, "cannot be changed")
	f(`[{"name":"post","fields":["like","repost","view","comment"]}]`, "cannot be changed")
	f(`[{"name":"video","fields":[]}]`, "1 to 255 fields")
	f(`[{"name":"video","fields":["a","a"]}]`, "listed twice")
	f(`[{"name":"video","fields":["a"]},{"name":"video","fields":["b"]}]`, "defined twice")
	f(`[{"name":"v","fields":["a"],"kind":"x"}]`, "unknown field")
	f(`{"name":"v"}`, "JSON list")
	f(`[] []`, "trailing")
}

// TestFamiliesWithoutViewers: a families file written before 1.3 lists the post family
// without viewers; it still starts, and counts no viewers.
func TestFamiliesWithoutViewers(t *testing.T) {
	fams, err := pipeline.ReadFamilies([]byte(`[{"name":"post","fields":["like","repost","comment","view"]}]`))
	if err != nil {
		t.Fatal(err)
	}
	post, _ := fams.Lookup(pipeline.FamilyPost)
	if _, err := post.Field(pipeline.FieldViewers); err == nil {
		t.Errorf("post family %v: listed without viewers, it has them", post.Fields)
	}
	def, _ := pipeline.Families(pipeline.DefaultFamilies()).Lookup(pipeline.FamilyPost)
	if _, err := def.Field(pipeline.FieldViewers); err != nil {
		t.Errorf("the default post family %v has no viewers", def.Fields)
	}
}
