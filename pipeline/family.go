package pipeline

import "fmt"

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
