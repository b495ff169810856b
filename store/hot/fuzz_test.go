package hot_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/tally-dev/tally/store"
	"github.com/tally-dev/tally/store/hot"
	"github.com/tally-dev/tally/store/storetest"
)

// FuzzTable runs operations decoded from the input against the table and a map.
func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add(bytes.Repeat([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, 30))
	f.Add(bytes.Repeat([]byte{0, 0, 5, 0, 4, 200, 5, 1, 5, 0, 0, 9, 6, 0, 5, 0, 4, 1}, 10))
	f.Fuzz(func(t *testing.T, data []byte) {
		const fields = 2
		tb, ref := hot.NewWithOptions(fields, hot.Options{MaxLoad: 0.9, MinSize: 4}), store.NewMap(fields)
		cp := store.NewMap(fields) // a checkpoint fed by Dirty
		zero := make([]uint64, fields)
		for len(data) >= 6 {
			op, f := data[0]%8, int(data[1]%fields)
			// Four buckets in each of four groups: open, sealed and late ids all occur.
			id := uint64(binary.LittleEndian.Uint16(data[2:4])) | uint64(data[4]&3)<<32 | uint64(data[4]>>2&3)<<40
			n := int64(int8(data[5]))
			if n > 100 {
				n *= 1000 // overflow values
			}
			data = data[6:]
			switch op {
			case 0, 1:
				if g, w := tb.Add(id, f, n), ref.Add(id, f, n); g != w {
					t.Fatalf("Add(%d,%d,%d) = %d want %d", id, f, n, g, w)
				}
			case 2:
				tb.Set(id, f, uint64(max(n, 0)))
				ref.Set(id, f, uint64(max(n, 0)))
			case 3:
				c := []uint64{0, uint64(max(n, 0))}
				tb.Put(id, c)
				ref.Put(id, c)
			case 4:
				tb.Compact()
			case 5:
				bk := uint32(id >> 32)
				tb.DropBucket(bk)
				for _, m := range []*store.Map{ref, cp} {
					m.Range(func(id uint64, _ []uint64) bool {
						if uint32(id>>32) == bk {
							m.Put(id, zero)
						}
						return true
					})
				}
			case 6:
				tb.Dirty(func(id uint64, c []uint64) bool { cp.Put(id, c); return true })
				tb.ClearDirty()
				storetest.Equal(t, cp, ref)
			default:
				got, want := make([]uint64, fields), make([]uint64, fields)
				if g, w := tb.Get(id, got), ref.Get(id, want); g != w || got[0] != want[0] || got[1] != want[1] {
					t.Fatalf("Get(%d) = %v %v want %v %v", id, got, g, want, w)
				}
			}
		}
		storetest.Equal(t, tb, ref)
		var buf bytes.Buffer
		if _, err := tb.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		back := hot.New(fields)
		if _, err := back.ReadFrom(&buf); err != nil {
			t.Fatal(err)
		}
		storetest.Equal(t, back, ref)
	})
}

// FuzzReadFrom feeds arbitrary bytes to the loader: an error, never a panic.
func FuzzReadFrom(f *testing.F) {
	tb := hot.New(2)
	tb.Put(9, []uint64{1, 70000})
	var buf bytes.Buffer
	tb.WriteTo(&buf)
	f.Add(buf.Bytes())
	f.Add([]byte("TLYH\x01\x02\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = hot.New(2).ReadFrom(bytes.NewReader(data))
	})
}
