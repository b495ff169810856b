package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// Family is a kind of counted thing with a fixed list of counter fields. Families are
// configuration: a new one needs no new Go type.
type Family struct {
	Name   string   `json:"name"`
	Fields []string `json:"fields"`
}

// The families the event types of this package write to.
const (
	FamilyPost   = "post"
	FamilyUser   = "user"
	FamilyUnread = "unread"
)

// FieldViewers is the post family's count of distinct users who viewed a post (views
// that carry a uid): exact up to ExactViewers, an estimate past that (see
// docs/contract.md). It is not one of the default fields, since it adds a 16-bit pair of
// counters to every post in RAM (16 bytes a post instead of 12): WithViewers, tallyd
// --viewers or a families file that lists it count viewers.
const FieldViewers = "viewers"

// ExactViewers is the most viewers a post's count gives exactly (store/sketch's
// ExactMax).
const ExactViewers = 128

// optionalField reports whether a field may be added at the end of a default family.
func optionalField(family, name string) bool { return family == FamilyPost && name == FieldViewers }

// WithViewers is fams with viewers added to the post family, which then counts them.
func WithViewers(fams Families) Families {
	out := slices.Clone(fams)
	for i, f := range out {
		if f.Name == FamilyPost && !slices.Contains(f.Fields, FieldViewers) {
			out[i].Fields = append(slices.Clone(f.Fields), FieldViewers)
		}
	}
	return out
}

// DefaultFamilies are post, user and unread.
func DefaultFamilies() []Family {
	return []Family{
		{Name: FamilyPost, Fields: []string{"like", "repost", "comment", "view"}},
		{Name: FamilyUser, Fields: []string{"follower", "following", "post"}},
		{Name: FamilyUnread, Fields: []string{"comment", "mention", "like", "dm", "feed"}},
	}
}

// Field returns the index of the named field.
func (f Family) Field(name string) (int, error) {
	for i, n := range f.Fields {
		if n == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w %q in family %s (fields: %v)", ErrUnknownField, name, f.Name, f.Fields)
}

// Estimated names f's fields whose counts may be estimates (GetReply.Estimated): the
// post family's viewers.
func (f Family) Estimated() []string {
	if f.Name == FamilyPost && slices.Contains(f.Fields, FieldViewers) {
		return []string{FieldViewers}
	}
	return nil
}

// Families is an ordered set of families looked up by name.
type Families []Family

// Lookup returns the named family.
func (fs Families) Lookup(name string) (Family, error) {
	for _, f := range fs {
		if f.Name == name {
			return f, nil
		}
	}
	return Family{}, fmt.Errorf("%w %q", ErrUnknownFamily, name)
}

// Validate checks that names are usable as subject tokens and fields fit a delta.
func (fs Families) Validate() error {
	seen := map[string]bool{}
	for _, f := range fs {
		if !validToken(f.Name) {
			return fmt.Errorf("family name %q is not a valid subject token", f.Name)
		}
		if f.Name == "ev" { // <prefix>.part.ev.<p> is the event partitions' (Subjects.PartEvents)
			return fmt.Errorf("family name %q is reserved", f.Name)
		}
		if seen[f.Name] {
			return fmt.Errorf("family %q defined twice", f.Name)
		}
		seen[f.Name] = true
		if len(f.Fields) == 0 || len(f.Fields) > 255 {
			return fmt.Errorf("family %q must have 1 to 255 fields", f.Name)
		}
	}
	return nil
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c == '.' || c == '*' || c == '>' || c >= 0x7f {
			return false
		}
	}
	return true
}

// ReadFamilies reads families from JSON, a list of {"name", "fields"} (tallyd
// --families), and returns the default families followed by them, validated. A default
// family may be listed only as it is — the event types write to its fields, and the
// stored counters are read by field position, so neither may change — or with optional
// fields added at its end: a post family listed with viewers counts them.
func ReadFamilies(data []byte) (Families, error) {
	var extra []Family
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&extra); err != nil {
		return nil, fmt.Errorf("families: want a JSON list of {\"name\": ..., \"fields\": [...]}: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("families: trailing data after the list")
	}
	defaults := Families(DefaultFamilies())
	fams := slices.Clone(defaults)
	for _, f := range extra {
		if i := slices.IndexFunc(defaults, func(d Family) bool { return d.Name == f.Name }); i >= 0 {
			def := defaults[i]
			if len(f.Fields) < len(def.Fields) || !slices.Equal(f.Fields[:len(def.Fields)], def.Fields) ||
				slices.ContainsFunc(f.Fields[len(def.Fields):], func(name string) bool { return !optionalField(f.Name, name) }) {
				return nil, fmt.Errorf("family %q is built in with fields %v; it cannot be changed (beyond adding %s to post)", f.Name, def.Fields, FieldViewers)
			}
			fams[i] = f
			continue
		}
		seen := map[string]bool{}
		for _, name := range f.Fields {
			if name == "" || seen[name] {
				return nil, fmt.Errorf("family %q: field %q is empty or listed twice", f.Name, name)
			}
			seen[name] = true
		}
		fams = append(fams, f)
	}
	if err := fams.Validate(); err != nil {
		return nil, fmt.Errorf("families: %w", err)
	}
	return fams, nil
}
