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
	f.Fuzz(func(t *testing.T, data []byte) {
		tb, ref := hot.NewWithOptions(2, hot.Options{MaxLoad: 0.9, CompactLoad: 0.95, MinSize: 3}), store.NewMap(2)
		for len(data) >= 6 {
			op, f := data[0]%5, int(data[1]%2)
			id := uint64(binary.LittleEndian.Uint16(data[2:4])) | uint64(data[4]%4)<<32
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
				tb.Put(id, []uint64{0, 0})
				ref.Put(id, []uint64{0, 0})
			default:
				tb.Compact()
			}
		}
		storetest.Equal(t, tb, ref)
		var buf bytes.Buffer
		if _, err := tb.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		back := hot.New(2)
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
