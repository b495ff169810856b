package rel

import (
	"math/rand/v2"
	"slices"
	"testing"
)

type op struct {
	on bool
	e  Event
}

// inOrder is the reference: the relation after applying ops in place order — on if the
// last is an "on", made by the first "on" after the last "off".
func inOrder(ops []op) (on bool, made Event) {
	ops = slices.Clone(ops)
	slices.SortFunc(ops, func(a, b op) int { return cmpPlace(a.e.Place, b.e.Place) })
	for _, o := range ops {
		switch {
		case o.on && !on:
			on, made = true, o.e
		case !o.on:
			on, made = false, Event{}
		}
	}
	return on, made
}

func TestApply(t *testing.T) {
	on := func(p uint64) op { return op{true, Event{Place: p, TS: int64(p) * 10, Owner: p + 1}} }
	off := func(p uint64) op { return op{false, Event{Place: p}} }
	f := func(t *testing.T, arrival []op, wantOn bool, wantMade uint64) {
		t.Helper()
		var s State
		for _, o := range arrival {
			s.Apply(o.on, o.e)
		}
		if s.On != wantOn || (wantOn && s.Made.Place != wantMade) {
			t.Fatalf("arrival %v: on=%v made at %d, want on=%v made at %d", arrival, s.On, s.Made.Place, wantOn, wantMade)
		}
		if gotOn, made := inOrder(arrival); gotOn != wantOn || made.Place != s.Made.Place {
			t.Fatalf("the reference disagrees with the want of %v", arrival)
		}
	}
	t.Run("like then unlike, the like late", func(t *testing.T) { f(t, []op{off(20), on(10)}, false, 0) })
	t.Run("like, late unlike, like", func(t *testing.T) { f(t, []op{on(10), on(30), off(20)}, true, 30) })
	t.Run("like twice: made by the first", func(t *testing.T) { f(t, []op{on(30), on(10)}, true, 10) })
	t.Run("an unlike before the known one", func(t *testing.T) { f(t, []op{on(10), off(20), on(30), off(5)}, true, 30) })
	t.Run("a late like between a tombstone and the like", func(t *testing.T) { f(t, []op{off(10), on(30), on(20)}, true, 20) })
	t.Run("a late like before the tombstone", func(t *testing.T) { f(t, []op{off(10), on(30), on(5)}, true, 30) })
	t.Run("an unlike after everything", func(t *testing.T) { f(t, []op{on(10), on(20), off(30)}, false, 0) })
	t.Run("a late unlike among many likes", func(t *testing.T) { f(t, []op{on(10), on(40), on(30), on(50), off(20)}, true, 30) })
	t.Run("the same event twice", func(t *testing.T) { f(t, []op{on(10), off(20), on(10)}, false, 0) })
}

// TestApplyAnyOrder applies random histories of one relation in random orders of
// arrival, merged from a few sources each in place order as partitions hand them over,
// and in any order at all: the state is always the one of the stream's order, and the
// changes Apply reports add up to it.
func TestApplyAnyOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 20_000 {
		n := 1 + r.IntN(12)
		places := r.Perm(40)[:n]
		ops := make([]op, n)
		for i := range ops {
			p := uint64(places[i] + 1)
			ops[i] = op{on: r.IntN(3) != 0, e: Event{Place: p, TS: int64(p) * 7, Owner: uint64(r.IntN(3))}}
		}
		arrival := slices.Clone(ops)
		if trial%2 == 0 {
			r.Shuffle(len(arrival), func(i, j int) { arrival[i], arrival[j] = arrival[j], arrival[i] })
		} else { // sources in place order, interleaved
			slices.SortFunc(arrival, func(a, b op) int { return cmpPlace(a.e.Place, b.e.Place) })
			arrival = interleave(r, arrival, 1+r.IntN(3))
		}
		var s State
		wasOn, was := false, Event{}
		for _, o := range arrival {
			changed, forgot := s.Apply(o.on, o.e)
			if forgot {
				t.Fatalf("forgot with %d events", n)
			}
			if changed != (s.On != wasOn || (s.On && s.Made != was)) {
				t.Fatalf("arrival %v: changed=%v but the view went from %v/%v to %v/%v", arrival, changed, wasOn, was, s.On, s.Made)
			}
			wasOn, was = s.On, s.Made
			// A state survives its encoding at every step.
			got, k, err := Decode(s.Append(nil))
			if err != nil || k != len(s.Append(nil)) || got.On != s.On || got.Made != s.Made || got.Off != s.Off || !slices.Equal(got.Later, s.Later) {
				t.Fatalf("%+v decoded as %+v (%d bytes, %v)", s, got, k, err)
			}
		}
		if on, made := inOrder(ops); s.On != on || (on && s.Made != made) {
			t.Fatalf("arrival %v: on=%v made %+v, stream order gives on=%v made %+v", arrival, s.On, s.Made, on, made)
		}
	}
}

// interleave deals sorted ops to k sources and merges them at random, each source
// keeping its order.
func interleave(r *rand.Rand, sorted []op, k int) []op {
	src := make([][]op, k)
	for _, o := range sorted {
		i := r.IntN(k)
		src[i] = append(src[i], o)
	}
	var out []op
	for len(out) < len(sorted) {
		i := r.IntN(k)
		if len(src[i]) > 0 {
			out = append(out, src[i][0])
			src[i] = src[i][1:]
		}
	}
	return out
}

// TestForget: past MaxLater likes after the one that made it, the oldest is forgotten
// and said so; on or off stays exact.
func TestForget(t *testing.T) {
	var s State
	s.Apply(true, Event{Place: 1})
	forgot := 0
	for p := uint64(10); p < 10+MaxLater+3; p++ {
		if _, f := s.Apply(true, Event{Place: p}); f {
			forgot++
		}
	}
	if forgot != 3 || len(s.Later) != MaxLater {
		t.Fatalf("forgot %d, kept %d", forgot, len(s.Later))
	}
	if changed, _ := s.Apply(false, Event{Place: 100}); !changed || s.On {
		t.Fatalf("an unlike after every like left it on")
	}
}

func TestUnmarshal(t *testing.T) {
	f := func(t *testing.T, v []byte, want State, wantErr bool) {
		t.Helper()
		got, err := Unmarshal(v)
		if (err != nil) != wantErr || (!wantErr && (got.On != want.On || got.Made != want.Made || got.Off != want.Off)) {
			t.Fatalf("%x: %+v, %v; want %+v (error %v)", v, got, err, want, wantErr)
		}
	}
	be := func(vs ...uint64) []byte {
		var b []byte
		for _, v := range vs {
			b = append(b, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
		}
		return b
	}
	t.Run("time", func(t *testing.T) { f(t, be(1234), State{On: true, Made: Event{TS: 1234}}, false) })
	t.Run("time and place", func(t *testing.T) { f(t, be(1234, 99), State{On: true, Made: Event{TS: 1234, Place: 99}}, false) })
	tomb := State{Off: 77}
	t.Run("tombstone", func(t *testing.T) { f(t, tomb.Marshal(), tomb, false) })
	full := State{On: true, Made: Event{Place: 5, TS: -3, Owner: 9}, Off: 2}
	t.Run("state", func(t *testing.T) { f(t, full.Marshal(), full, false) })
	t.Run("empty", func(t *testing.T) { f(t, nil, State{}, true) })
	t.Run("truncated", func(t *testing.T) { f(t, full.Marshal()[:4], State{}, true) })
	t.Run("trailing", func(t *testing.T) { f(t, append(full.Marshal(), 0), State{}, true) })
	t.Run("bad flags", func(t *testing.T) { f(t, []byte{version, 0x80}, State{}, true) })
}

func FuzzUnmarshal(f *testing.F) {
	f.Add((&State{On: true, Made: Event{Place: 5, TS: 3, Owner: 9}, Later: []Event{{Place: 7}}}).Marshal())
	f.Add([]byte{version, flagOff, 7})
	f.Fuzz(func(t *testing.T, v []byte) {
		s, err := Unmarshal(v)
		if err != nil || v[0] != version {
			return
		}
		if got, err := Unmarshal(s.Marshal()); err != nil || got.On != s.On || got.Made != s.Made || got.Off != s.Off {
			t.Fatalf("%x: %+v does not survive its encoding: %+v, %v", v, s, got, err)
		}
	})
}

// TestMarshalAllocatesOnce: a state is encoded in the one allocation of its value, with
// or without later events kept, where the value grew from one byte, three or four times.
func TestMarshalAllocatesOnce(t *testing.T) {
	for _, s := range []State{
		{On: true, Made: Event{Place: 1 << 40, TS: 1_700_000_000_000, Owner: 1 << 60}, Off: 1 << 50},
		{On: true, Made: Event{Place: 9, TS: -1}, Later: []Event{{Place: 1 << 62, TS: 1 << 62, Owner: 1 << 63}, {Place: 3}}},
		{Off: 12},
	} {
		if n := testing.AllocsPerRun(100, func() { s.Marshal() }); n != 1 {
			t.Errorf("state %+v: %v allocations, want 1", s, n)
		}
		if got, err := Unmarshal(s.Marshal()); err != nil || !got.Equal(s) {
			t.Errorf("state %+v comes back as %+v, %v", s, got, err)
		}
	}
}

// TestLaterKeepsTheNewest: whatever order "on" events come in, Later holds the MaxLater
// placed last of those after Made, in place order, and says it forgot one exactly when
// an event new to it found it full.
func TestLaterKeepsTheNewest(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		s := State{On: true, Made: Event{Place: 1}}
		var model []uint64 // the places kept
		for range r.IntN(60) {
			p := 2 + uint64(r.IntN(40))
			full, seen := len(model) == MaxLater, slices.Contains(model, p)
			if _, forgot := s.Apply(true, Event{Place: p, TS: int64(p)}); forgot != (full && !seen) {
				t.Fatalf("place %d into %v: forgot %v", p, model, forgot)
			}
			if !seen {
				model = append(model, p)
				slices.Sort(model)
				model = model[max(0, len(model)-MaxLater):]
			}
			got := make([]uint64, len(s.Later))
			for i, e := range s.Later {
				got[i] = e.Place
			}
			if !slices.Equal(got, model) {
				t.Fatalf("after place %d: later %v, want %v", p, got, model)
			}
		}
	}
}

// TestLaterFullInPlace: a like made again on a state whose Later is full costs no
// allocation past the Clone it is applied to (it made the full list again before).
func TestLaterFullInPlace(t *testing.T) {
	full := State{On: true, Made: Event{Place: 1}}
	for p := uint64(2); p < 2+MaxLater; p++ {
		full.Apply(true, Event{Place: p})
	}
	next := uint64(100)
	if n := testing.AllocsPerRun(100, func() {
		st := full.Clone()
		next++
		if _, forgot := st.Apply(true, Event{Place: next}); !forgot || st.Later[MaxLater-1].Place != next {
			t.Fatalf("later %v", st.Later)
		}
	}); n != 1 {
		t.Fatalf("%v allocations, want the Clone's one", n)
	}
}
