package sketch

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tally-dev/tally/pipeline/buildinfo"
)

// users are n distinct user ids from seed: random, so that neither their order nor
// their spacing helps the sketch.
func users(seed uint64, n int) []uint64 {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	seen := make(map[uint64]bool, n)
	us := make([]uint64, 0, n)
	for len(us) < n {
		if u := r.Uint64() >> 1; !seen[u] {
			seen[u] = true
			us = append(us, u)
		}
	}
	return us
}

func of(us ...uint64) *Sketch {
	var s Sketch
	for _, u := range us {
		s.Add(u)
	}
	return &s
}

// marshal is every piece of s, each after its number and length: what a store keeps.
func marshal(t *testing.T, s *Sketch) []byte {
	t.Helper()
	var b []byte
	for c := range Chunks {
		piece := s.AppendChunk(nil, c)
		if len(piece) > MaxChunk {
			t.Fatalf("piece %d of form %d takes %d bytes, past MaxChunk %d", c, s.form, len(piece), MaxChunk)
		}
		if len(piece) > 0 {
			b = append(append(b, byte(c), byte(len(piece)), byte(len(piece)>>8)), piece...)
		}
	}
	return b
}

// Unmarshal loads what marshal wrote.
func Unmarshal(b []byte) (Sketch, error) {
	var s Sketch
	for len(b) > 0 {
		if len(b) < 3 || len(b) < 3+int(b[1])|int(b[2])<<8 {
			return Sketch{}, ErrCorrupt
		}
		n := int(b[1]) | int(b[2])<<8
		if err := s.LoadChunk(int(b[0]), b[3:3+n]); err != nil {
			return Sketch{}, err
		}
		b = b[3+n:]
	}
	return s, nil
}

func TestExactWhileSmall(t *testing.T) {
	for _, n := range []int{0, 1, 2, 17, ExactMax - 1, ExactMax} {
		us := users(uint64(n), n)
		var s Sketch
		for i, u := range us {
			if s.Add(u) == Unchanged {
				t.Fatalf("%d users: adding the new user %d changed nothing", n, i)
			}
			if s.Add(us[i/2]) != Unchanged {
				t.Fatalf("%d users: adding user %d again changed the sketch", n, i/2)
			}
		}
		if got, exact := s.Count(); got != uint64(n) || !exact {
			t.Errorf("%d users: Count() = %d, exact %v; want %d, exact", n, got, exact, n)
		}
	}
}

// TestForms checks the form a sketch takes as it grows: exact up to ExactMax users,
// sparse registers up to sparseMax, dense after.
func TestForms(t *testing.T) {
	us := users(1, 20_000)
	var s Sketch
	for i, u := range us {
		s.Add(u)
		want := formExact
		switch {
		case i+1 > ExactMax && s.form == formSparse:
			want = formSparse
			if len(s.sparse) > sparseMax {
				t.Fatalf("%d users: %d sparse registers, past %d", i+1, len(s.sparse), sparseMax)
			}
		case i+1 > ExactMax:
			want = formDense
		}
		if s.form != want {
			t.Fatalf("%d users: form %d, want %d", i+1, s.form, want)
		}
		if i%97 == 0 { // Count keeps what it counted: it must see the adds since
			got, _ := s.Count()
			fresh, err := Unmarshal(marshal(t, &s))
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := fresh.Count(); got != want {
				t.Fatalf("%d users: Count() = %d after adds, a copy counts %d", i+1, got, want)
			}
		}
	}
	if s.form != formDense {
		t.Fatalf("20 000 users: form %d, want dense", s.form)
	}
	if _, exact := s.Count(); exact {
		t.Error("a dense sketch says its count is exact")
	}
}

// TestStandardError: past ExactMax the count is the registers' estimate; over the range
// the issue asks for, its error stays that of 2^14 registers (0.81 %), and at 1 M
// distinct users within 1 %. The users are drawn from fixed seeds, so the test is
// deterministic.
func TestStandardError(t *testing.T) {
	trials := 24
	if testing.Short() || buildinfo.Race {
		trials = 6
	}
	for _, n := range []int{ExactMax + 1, 1_000, 3_000, 10_000, 100_000, 1_000_000} {
		var sq float64
		for trial := range trials {
			var s Sketch
			r := rand.New(rand.NewPCG(uint64(n), uint64(trial)))
			for range n {
				s.Add(r.Uint64()) // 64-bit draws: a repeat among 10^6 is 2^-25 likely
			}
			got, _ := s.Count()
			e := (float64(got) - float64(n)) / float64(n)
			if math.Abs(e) > 4*0.0081 {
				t.Errorf("%d users, trial %d: counted %d, error %.2f %% (over 4 standard errors)", n, trial, got, 100*e)
			}
			sq += e * e
		}
		rms := math.Sqrt(sq / float64(trials))
		t.Logf("%d users: RMS error %.3f %% over %d trials", n, 100*rms, trials)
		if n == 1_000_000 && rms > 0.01 {
			t.Errorf("1 M users: RMS error %.3f %%, want ≤ 1 %%", 100*rms)
		}
	}
}

// TestDenseOf: a sparse register turned dense is the register its hash has among 2^14.
func TestDenseOf(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	hs := []uint64{0, 1, 1 << 38, 1<<39 - 1, 1 << 50, ^uint64(0)}
	for range 100_000 {
		hs = append(hs, r.Uint64()>>r.IntN(64))
	}
	for _, h := range hs {
		gotIdx, gotRank := denseOf(register(h, sparsePrecision))
		wantIdx, wantRank := register(h, precision)
		if gotIdx != wantIdx || gotRank != wantRank {
			t.Fatalf("hash %#x: dense register %d rank %d from the sparse form, want %d rank %d", h, gotIdx, gotRank, wantIdx, wantRank)
		}
	}
}

// TestOrderAndRepeats: a replay, a standby or a retry adds the same users in another
// order, some more than once; the sketch must come out the same, byte for byte.
func TestOrderAndRepeats(t *testing.T) {
	for _, n := range []int{5, ExactMax + 3, 2_000, 6_000} {
		us := users(uint64(n)+7, n)
		a := marshal(t, of(us...))
		shuffled := append([]uint64(nil), us...)
		r := rand.New(rand.NewPCG(3, uint64(n)))
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		shuffled = append(shuffled, shuffled[:n/3]...)
		if b := marshal(t, of(shuffled...)); !bytes.Equal(a, b) {
			t.Errorf("%d users: another order with repeats gives another sketch (%d bytes against %d)", n, len(b), len(a))
		}
	}
}

// TestMerge: the merge of two sketches is the sketch of the union of their users, in
// every pair of forms.
func TestMerge(t *testing.T) {
	sizes := []int{0, 3, ExactMax, ExactMax + 10, 1_500, 8_000}
	for _, na := range sizes {
		for _, nb := range sizes {
			us := users(uint64(na*31+nb), na+nb)
			// the two sets overlap by a quarter of the smaller
			a, b := us[:na], us[na-min(na, nb)/4:]
			if len(b) > nb {
				b = b[:nb]
			}
			want := of(append(append([]uint64(nil), a...), b...)...)
			got := of(a...)
			got.Merge(of(b...))
			if !got.Equal(want) {
				gn, _ := got.Count()
				wn, _ := want.Count()
				t.Errorf("merge of %d and %d users: %d (form %d), want the union's %d (form %d)", na, nb, gn, got.form, wn, want.form)
			}
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, ExactMax, ExactMax + 1, 1_000, 10_000} {
		s := of(users(uint64(n)+1, n)...)
		b := marshal(t, s)
		got, err := Unmarshal(b)
		if err != nil {
			t.Fatalf("%d users: %v", n, err)
		}
		if !got.Equal(s) {
			t.Errorf("%d users: decoded another sketch", n)
		}
		if again := marshal(t, &got); !bytes.Equal(again, b) {
			t.Errorf("%d users: decoded and encoded again, %d bytes differ from %d", n, len(again), len(b))
		}
	}
}

func TestLoadChunkCorrupt(t *testing.T) {
	dense := of(users(9, 10_000)...).AppendChunk(nil, 5)
	badDense := append([]byte(nil), dense...)
	badDense[1] = 0xff // register 640 of rank 63
	c5 := uint64(5) << (64 - chunkBits)
	for name, b := range map[string][]byte{
		"empty":                 {},
		"unknown form":          {9, 1, 1},
		"no count":              {byte(formExact)},
		"zero entries":          {byte(formExact), 0},
		"too many exact":        {byte(formExact), exactChunkMax + 1, 1},
		"cut short":             binary.AppendUvarint([]byte{byte(formExact), 2}, 5),
		"not ascending":         binary.AppendUvarint(binary.AppendUvarint([]byte{byte(formExact), 2}, 5), 0),
		"out of the piece":      binary.AppendUvarint([]byte{byte(formExact), 1}, c5),
		"trailing bytes":        append(binary.AppendUvarint([]byte{byte(formExact), 1}, 5), 5),
		"rank 0":                {byte(formSparse), 1, 0x40},
		"rank past the largest": {byte(formSparse), 1, sparseMaxRank + 1},
		"index repeated":        {byte(formSparse), 2, 0x41, 0x01},
		"dense cut short":       dense[:50],
		"dense register 63":     badDense,
	} {
		var s Sketch
		if err := s.LoadChunk(5, b); err == nil {
			t.Errorf("%s: % x loaded", name, b)
		}
	}
	var s Sketch
	two := binary.AppendUvarint([]byte{byte(formExact), 1}, 1)
	if err := s.LoadChunk(5, two); err != nil {
		t.Fatal(err)
	}
	if err := s.LoadChunk(5, two); err == nil {
		t.Error("a piece loaded twice")
	}
	if err := s.LoadChunk(6, []byte{byte(formSparse), 1, 0x41}); err == nil {
		t.Error("a sparse piece loaded into an exact sketch")
	}
}

// TestPiecesChanged: what Add reports is what a store must write again — the one piece
// it names, or every piece when it reshaped — and the pieces stored that way load back
// as the sketch, in every form, with users spread out or crowded into one piece (as a
// producer that picks users by their hashes could).
func TestPiecesChanged(t *testing.T) {
	crowded := make([]uint64, 0, 4000)
	r := rand.New(rand.NewPCG(11, 11))
	for len(crowded) < cap(crowded) {
		if u := r.Uint64(); exactChunk(hash(u)) == 3 {
			crowded = append(crowded, u)
		}
	}
	for name, us := range map[string][]uint64{"spread": users(12, 6_000), "crowded": crowded} {
		var s Sketch
		stored := map[int][]byte{}
		for i, u := range append(us, us[:100]...) {
			before := marshal(t, &s)
			switch c := s.Add(u); c {
			case Unchanged:
				if after := marshal(t, &s); !bytes.Equal(before, after) {
					t.Fatalf("%s, user %d: Add reported no change and a piece changed", name, i)
				}
			case Reshaped:
				clear(stored)
				for c := range Chunks {
					if p := s.AppendChunk(nil, c); len(p) > 0 {
						stored[c] = p
					}
				}
			default:
				stored[c] = s.AppendChunk(nil, c)
			}
			if i%50 != 0 && i < len(us)-1 {
				continue
			}
			var loaded Sketch
			for c := range Chunks {
				if p, ok := stored[c]; ok {
					if err := loaded.LoadChunk(c, p); err != nil {
						t.Fatalf("%s, user %d: %v", name, i, err)
					}
				}
			}
			if !loaded.Equal(&s) {
				t.Fatalf("%s, user %d: the pieces written as Add reported load as another sketch (form %d, want %d)", name, i, loaded.form, s.form)
			}
		}
	}
}

func FuzzLoadChunk(f *testing.F) {
	for _, n := range []int{1, ExactMax + 1, 700, 10_000} {
		s := of(users(uint64(n), n)...)
		for c := range Chunks {
			if p := s.AppendChunk(nil, c); len(p) > 0 {
				f.Add(uint8(c), p)
				break
			}
		}
	}
	f.Fuzz(func(t *testing.T, c uint8, b []byte) {
		var s Sketch
		if err := s.LoadChunk(int(c%Chunks), b); err != nil {
			return
		}
		s.Count()
		s.Add(42)
		s.Merge(of(users(1, 200)...))
	})
}
