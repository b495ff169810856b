package node

import "testing"

func TestSpans(t *testing.T) {
	f := func(t *testing.T, in []int, want string) {
		t.Helper()
		if got := spans(in); got != want {
			t.Errorf("spans(%v) = %q, want %q", in, got, want)
		}
	}
	f(t, nil, "none")
	f(t, []int{3}, "3")
	f(t, []int{0, 1, 2, 3}, "0-3")
	f(t, []int{9, 0, 1, 6, 10, 11}, "0-1,6,9-11")
}
