package counter

import (
	"testing"
)

// The cold cache holds at most size ids, keeps what is read again, and copies values in
// and out (a caller's buffer is never aliased).
func TestColdCache(t *testing.T) {
	c := coldCache{size: 8}
	v := []uint64{1, 2}
	for id := range uint64(4) {
		v[0] = id
		c.put(id, v)
	}
	v[0] = 99
	got := make([]uint64, 2)
	if !c.get(0, got) || got[0] != 0 {
		t.Fatalf("id 0: %v", got)
	}
	for id := uint64(10); id < 100; id++ {
		c.put(id, v)
		c.get(0, got) // read again and again: stays
		if n := len(c.young) + len(c.old); n > c.size {
			t.Fatalf("%d ids cached, size %d", n, c.size)
		}
	}
	if !c.get(0, got) || got[0] != 0 {
		t.Fatal("an id read at every step was dropped")
	}
	if c.get(1, got) || c.get(10, got) {
		t.Fatal("old ids still cached")
	}
	c.drop(0)
	if c.get(0, got) {
		t.Fatal("dropped id still cached")
	}
}

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
