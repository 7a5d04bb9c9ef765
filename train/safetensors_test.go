package train

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestSafetensorsRoundTrip(t *testing.T) {
	ts := []Tensor{
		{Name: "a", Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, -6}},
		{Name: "scalar", Shape: []int{}, Data: []float32{7}},
		{Name: "empty", Shape: []int{0, 4}, Data: []float32{}},
		{Name: "b", Shape: []int{1}, Data: []float32{-0.5}},
	}
	p := filepath.Join(t.TempDir(), "x.safetensors")
	if err := WriteSafetensors(p, ts, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	got, meta, err := ReadSafetensors(p)
	if err != nil {
		t.Fatal(err)
	}
	if meta["k"] != "v" || len(got) != len(ts) {
		t.Fatalf("meta %v, %d tensors", meta, len(got))
	}
	byName := map[string]Tensor{}
	for _, x := range got {
		byName[x.Name] = x
	}
	for _, w := range ts {
		g := byName[w.Name]
		if !reflect.DeepEqual(g.Shape, w.Shape) || len(g.Data) != len(w.Data) {
			t.Fatalf("%s: got %+v want %+v", w.Name, g, w)
		}
		for i := range w.Data {
			if g.Data[i] != w.Data[i] {
				t.Fatalf("%s[%d] = %v", w.Name, i, g.Data[i])
			}
		}
	}
	b, _ := os.ReadFile(p)
	// the raw format: 8-byte LE header length, JSON, then data; header padded to 8
	hl := int(b[0]) | int(b[1])<<8
	if (8+hl)%8 != 0 || b[8] != '{' || len(b) != 8+hl+4*(6+1+0+1) {
		t.Fatalf("layout: header %d, file %d bytes", hl, len(b))
	}
	for cut := 0; cut < len(b); cut += 7 {
		if _, _, err := ParseSafetensors(b[:cut]); !errors.Is(err, ErrCheckpoint) {
			t.Fatalf("truncated at %d: %v", cut, err)
		}
	}
}

func TestSafetensorsRejects(t *testing.T) {
	mk := func(hdr string, data int) []byte {
		for len(hdr)%8 != 0 {
			hdr += " "
		}
		b := make([]byte, 8+len(hdr)+data)
		b[0] = byte(len(hdr))
		copy(b[8:], hdr)
		return b
	}
	for name, b := range map[string][]byte{
		"dtype":    mk(`{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}`, 4),
		"shape":    mk(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8),
		"oob":      mk(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4),
		"overlap":  mk(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8),
		"gap":      mk(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8),
		"negative": mk(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4),
		"huge":     mk(`{"a":{"dtype":"F32","shape":[1000000000,1000000000,1000000000],"data_offsets":[0,4]}}`, 4),
		"json":     mk(`{"a":`, 0),
		"hdrlen":   {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'},
	} {
		if _, _, err := ParseSafetensors(b); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("%s: got %v, want ErrCheckpoint", name, err)
		}
	}
}

func FuzzParseSafetensors(f *testing.F) {
	dir := f.TempDir()
	p := filepath.Join(dir, "s")
	WriteSafetensors(p, []Tensor{{Name: "w", Shape: []int{2, 2}, Data: []float32{1, 2, 3, 4}}}, map[string]string{"a": "b"})
	b, _ := os.ReadFile(p)
	f.Add(b)
	f.Add(b[:12])
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, _, err := ParseSafetensors(b)
		if err != nil {
			return
		}
		var n int
		for _, x := range ts {
			n += 4 * len(x.Data)
		}
		if n > len(b) {
			t.Fatalf("decoded %d data bytes from a %d-byte input", n, len(b))
		}
	})
}
