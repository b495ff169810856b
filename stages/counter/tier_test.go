package counter

import "testing"

// A partition's cold groups: every group below a raised mark, and those listed.
func TestColdSet(t *testing.T) {
	var c coldSet
	if !c.empty() || c.has(0) || c.has(5) {
		t.Fatal("empty set")
	}
	c.add(9)
	c.add(3)
	c.add(0)
	c.raise(5)
	for gk, want := range map[uint32]bool{0: true, 1: true, 3: true, 4: true, 5: false, 8: false, 9: true, 10: false} {
		if c.has(gk) != want {
			t.Errorf("has(%d) = %v", gk, !want)
		}
	}
	if len(c.groups) != 2 { // 3 is covered by below now; 0 and 9 stay listed
		t.Fatalf("listed %v", c.groups)
	}
}
