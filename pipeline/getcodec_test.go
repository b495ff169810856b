package pipeline

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// byReflection is what Marshal wrote for v before the get codec: msgpack's reflection.
func byReflection(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetCustomStructTag("json")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func randomIDs(r *rand.Rand, nilOK bool) []ID {
	if nilOK && r.IntN(4) == 0 {
		return nil
	}
	ids := make([]ID, r.IntN(24))
	for i := range ids {
		ids[i] = ID(r.Uint64() >> r.IntN(64))
	}
	return ids
}

func randomString(r *rand.Rand) string {
	return strings.Repeat("x", []int{0, 1, 31, 32, 255, 256, 70000}[r.IntN(7)])
}

func randomGetRequest(r *rand.Rand) GetRequest {
	return GetRequest{IDs: randomIDs(r, true), Exact: r.IntN(2) == 0, Window: []string{"", "1h", randomString(r)}[r.IntN(3)]}
}

func randomGetReply(r *rand.Rand) GetReply {
	rep := GetReply{Window: []string{"", "5m"}[r.IntN(2)], Error: randomString(r), Code: []string{"", "bad_request"}[r.IntN(2)]}
	if r.IntN(4) > 0 {
		rep.Fields = []string{"like", "repost", "comment", "view"}[:r.IntN(5)]
	}
	if r.IntN(3) > 0 {
		rep.Counts = make([][]uint64, r.IntN(30))
		for i := range rep.Counts {
			if r.IntN(5) == 0 {
				continue // unavailable: nil
			}
			rep.Counts[i] = make([]uint64, r.IntN(6))
			for j := range rep.Counts[i] {
				rep.Counts[i][j] = r.Uint64() >> r.IntN(64)
			}
		}
	}
	if r.IntN(3) == 0 {
		rep.Changes = make([][]int64, r.IntN(30))
		for i := range rep.Changes {
			if r.IntN(5) == 0 {
				continue
			}
			rep.Changes[i] = make([]int64, r.IntN(6))
			for j := range rep.Changes[i] {
				rep.Changes[i][j] = int64(r.Uint64()) >> r.IntN(64)
			}
		}
	}
	rep.Unavailable = randomIDs(r, true)
	for range r.IntN(3) {
		s := Stale{IDs: randomIDs(r, true), BehindMs: int64(r.Uint64() >> r.IntN(64)), BehindMsgs: r.Uint64() >> r.IntN(65)}
		if r.IntN(4) > 0 {
			s.At = make([]int, r.IntN(20))
			for i := range s.At {
				s.At[i] = int(r.Int64() >> r.IntN(64))
			}
		}
		rep.Stale = append(rep.Stale, s)
	}
	if r.IntN(2) == 0 {
		rep.Estimated = []string{"view"}
	}
	return rep
}

func randomUnread(r *rand.Rand) Unread {
	var u Unread
	for _, v := range u.counts() {
		if r.IntN(3) > 0 {
			*v = r.Uint64() >> r.IntN(65)
		}
	}
	return u
}

func randomUnreadRequest(r *rand.Rand) UnreadRequest {
	req := UnreadRequest{UIDs: randomIDs(r, true)}
	if r.IntN(2) == 0 {
		req.UID = ID(r.Uint64() >> r.IntN(65))
	}
	return req
}

func randomUnreadReply(r *rand.Rand) UnreadReply {
	rep := UnreadReply{Unread: randomUnread(r), Error: []string{"", randomString(r)}[r.IntN(2)], Code: []string{"", "unavailable"}[r.IntN(2)]}
	if r.IntN(2) == 0 {
		rep.Users = make([]Unread, r.IntN(20))
		for i := range rep.Users {
			rep.Users[i] = randomUnread(r)
		}
	}
	return rep
}

// The get codec writes what reflection wrote, byte for byte, and reads it back to the
// value reflection reads; Marshal and Unmarshal take it for a get's request and reply.
func TestGetCodecAsReflection(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		req, rep := randomGetRequest(r), randomGetReply(r)
		ureq, urep := randomUnreadRequest(r), randomUnreadReply(r)
		for _, c := range []struct {
			v, into, want any
			got           []byte
		}{
			{&req, &GetRequest{}, &GetRequest{}, AppendGetRequest(nil, &req)},
			{&rep, &GetReply{}, &GetReply{}, AppendGetReply(nil, &rep)},
			{&ureq, &UnreadRequest{}, &UnreadRequest{}, AppendUnreadRequest(nil, &ureq)},
			{&urep, &UnreadReply{}, &UnreadReply{}, AppendUnreadReply(nil, &urep)},
		} {
			if want := byReflection(t, c.v); !bytes.Equal(c.got, want) {
				t.Fatalf("%+v:\n codec      %x\n reflection %x", c.v, c.got, want)
			}
			if m, err := Marshal(c.v, false); err != nil || !bytes.Equal(m, c.got) {
				t.Fatalf("Marshal(%T) wrote %x (%v), not the codec's bytes", c.v, m, err)
			}
			if rep, ok := c.v.(*GetReply); ok && len(rep.Error) < 32 && len(c.got) > rep.Size() {
				t.Fatalf("%+v: %d bytes, Size says %d at most", rep, len(c.got), rep.Size())
			}
			if err := decodeReflect(c.got, c.want, false); err != nil {
				t.Fatal(err)
			}
			rd := mpReader{b: c.got}
			var err error
			switch into := c.into.(type) {
			case *GetRequest:
				err = rd.readGetRequest(into)
			case *GetReply:
				err = rd.readGetReply(into)
			case *UnreadRequest:
				err = rd.readUnreadRequest(into)
			case *UnreadReply:
				err = rd.readUnreadReply(into)
			}
			// A nil list is left to reflection; the rest the reader reads itself.
			if err != nil && err != errNotFast || err == nil && rd.i != len(c.got) {
				t.Fatalf("%T read %d of %d bytes: %v", c.into, rd.i, len(c.got), err)
			}
			if err == nil && !reflect.DeepEqual(c.into, c.want) {
				t.Fatalf("read back:\n codec      %+v\n reflection %+v", c.into, c.want)
			}
		}
	}
}

// checkGetCodec: Unmarshal (the readers, then reflection for what they leave) and
// reflection alone make the same of data as a get request, strict or not, and as a get
// reply: the same value, or the same error.
func checkGetCodec(t *testing.T, data []byte) {
	t.Helper()
	if len(data) == 0 {
		return // refused before either reads it
	}
	for _, c := range []struct {
		strict    bool
		got, want any
	}{
		{true, &GetRequest{}, &GetRequest{}},
		{false, &GetRequest{}, &GetRequest{}},
		{false, &GetReply{}, &GetReply{}},
		{true, &UnreadRequest{}, &UnreadRequest{}},
		{false, &UnreadRequest{}, &UnreadRequest{}},
		{false, &UnreadReply{}, &UnreadReply{}},
	} {
		err := unmarshal(data, false, c.got, c.strict)
		want := decodeReflect(data, c.want, c.strict)
		if fmt.Sprint(err) != fmt.Sprint(want) || err == nil && !reflect.DeepEqual(c.got, c.want) {
			t.Fatalf("%x as %T (strict %v):\n codec      %+v %v\n reflection %+v %v", data, c.got, c.strict, c.got, err, c.want, want)
		}
	}
}

func TestGetCodecEdges(t *testing.T) {
	enc := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, data := range [][]byte{
		enc(map[string]any{"ids": []any{1, "2", uint64(1 << 63)}, "exact": true, "window": "1h"}),
		enc(map[string]any{"ids": nil}),
		enc(map[string]any{"ids": []any{}}),
		enc(map[string]any{"ids": []any{-1}}),
		enc(map[string]any{"ids": []any{1.5}}),
		enc(map[string]any{"ids": "1"}),
		enc(map[string]any{"exact": 1}),
		enc(map[string]any{"exact": nil}),
		enc(map[string]any{"window": []byte("1h")}),
		enc(map[string]any{"window": nil}),
		enc(map[string]any{"later": 1, "ids": []any{1}}),
		enc([]any{[]any{1}, true, "1h"}),
		enc(map[string]any{"counts": []any{[]any{1, 2}, nil, []any{}, []any{-1}}, "fields": []any{"a"}}),
		enc(map[string]any{"counts": []any{[]any{uint64(1 << 63)}}, "changes": []any{[]any{-5, 7}, nil}}),
		enc(map[string]any{"counts": nil, "fields": nil, "error": nil}),
		enc(map[string]any{"stale": []any{map[string]any{"ids": []any{1}, "at": []any{0}, "behind_ms": 5, "behind_msgs": 2, "later": []any{1}}}}),
		enc(map[string]any{"stale": []any{map[string]any{"ids": nil, "at": nil}}}),
		enc(map[string]any{"stale": []any{[]any{1}}}),
		enc(map[string]any{"added_later": map[string]any{"x": []any{1, 2}}, "counts": []any{[]any{3}}}),
		enc(map[string]any{"ids": []any{1}, "ids ": 2}),
		enc(map[string]any{"counts": []any{[]any{1}}, "counts ": 2}),
		{0x81, 0xa3, 'i', 'd', 's'}, {0x81, 0xa3, 'i', 'd', 's', 0x91}, {0x82, 0xa3, 'i', 'd', 's', 0x90}, {0xc1},
		append(enc(map[string]any{"ids": []any{1}}), 0x01),
		enc(map[string]any{"uid": "7", "uids": []any{1, "2"}}),
		enc(map[string]any{"uid": -1}),
		enc(map[string]any{"uid": nil, "uids": nil}),
		enc(map[string]any{"comment": 3, "like": uint64(1 << 63), "users": []any{map[string]any{"dm": 2, "later": 1}, nil}, "later": "x"}),
		enc(map[string]any{"comment": -3, "feed": 1.5}),
		enc(map[string]any{"users": []any{[]any{1, 2, 3, 4, 5, 6}}}),
	} {
		checkGetCodec(t, data)
	}
}

// FuzzGetCodec: the get codec's readers, with reflection for what they leave, make of
// any payload what reflection alone makes of it.
func FuzzGetCodec(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 8 {
		req, rep := randomGetRequest(r), randomGetReply(r)
		f.Add(AppendGetRequest(nil, &req))
		f.Add(AppendGetReply(nil, &rep))
		ureq, urep := randomUnreadRequest(r), randomUnreadReply(r)
		f.Add(AppendUnreadRequest(nil, &ureq))
		f.Add(AppendUnreadReply(nil, &urep))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkGetCodec(t, data) })
}

// coding is one way of writing and reading a payload, for the benchmarks.
type coding struct {
	name   string
	encode func(v any) ([]byte, error)
	decode func(data []byte, v any) error
}

// codings are the codecs (through Marshal and unmarshal, as Tally calls them) and
// reflection alone.
func codings(b *testing.B) []coding {
	return []coding{
		{"codec", func(v any) ([]byte, error) { return Marshal(v, false) }, func(data []byte, v any) error { return unmarshal(data, false, v, true) }},
		{"reflection", func(v any) ([]byte, error) { return byReflection(b, v), nil }, func(data []byte, v any) error { return decodeReflect(data, v, true) }},
	}
}

// BenchmarkGetCodec is a 20-id get's four codings (the client's request written, the
// query service's read, its reply of four counts each written, the client's read), by
// the codec and by reflection.
// Run: go test ./pipeline -run XXX -bench GetCodec -benchmem
func BenchmarkGetCodec(b *testing.B) {
	req := GetRequest{IDs: make([]ID, 20)}
	rep := GetReply{Fields: []string{"like", "repost", "comment", "view"}, Counts: make([][]uint64, 20)}
	for i := range req.IDs {
		req.IDs[i] = ID(1<<41 + i*7919)
		rep.Counts[i] = []uint64{uint64(i * 1000), 3, uint64(i), 1 << 20}
	}
	benchCodings(b, &req, AppendGetRequest(nil, &req), &rep, AppendGetReply(nil, &rep))
}

// BenchmarkUnreadCodec is one user's badge asked (tally.unread): the four codings, by
// the codec and by reflection.
// Run: go test ./pipeline -run XXX -bench UnreadCodec -benchmem
func BenchmarkUnreadCodec(b *testing.B) {
	req := UnreadRequest{UID: 1<<41 + 7}
	rep := UnreadReply{Unread: Unread{Comment: 3, Mention: 1, Like: 120, DM: 2, Feed: 40}}
	benchCodings(b, &req, AppendUnreadRequest(nil, &req), &rep, AppendUnreadReply(nil, &rep))
}

// benchCodings times a request and its reply each written and read back (from
// reqData and repData, the codec's bytes of them), by each coding; what is read must
// equal what was written.
func benchCodings[Req, Rep any](b *testing.B, req *Req, reqData []byte, rep *Rep, repData []byte) {
	for _, c := range codings(b) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.encode(req); err != nil {
					b.Fatal(err)
				}
				var gotReq Req
				if err := c.decode(reqData, &gotReq); err != nil {
					b.Fatal(err)
				}
				if _, err := c.encode(rep); err != nil {
					b.Fatal(err)
				}
				var gotRep Rep
				if err := c.decode(repData, &gotRep); err != nil {
					b.Fatal(err)
				}
			}
			var gotReq Req
			var gotRep Rep
			if c.decode(reqData, &gotReq) != nil || !reflect.DeepEqual(&gotReq, req) || c.decode(repData, &gotRep) != nil || !reflect.DeepEqual(&gotRep, rep) {
				b.Fatalf("%s read %+v and %+v, want %+v and %+v", c.name, gotReq, gotRep, *req, *rep)
			}
		})
	}
}
