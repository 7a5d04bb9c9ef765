package train

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestToBF16(t *testing.T) {
	for _, c := range []struct {
		name string
		in   uint32 // float32 bits
		want uint16
	}{
		{"one", 0x3f800000, 0x3f80},
		{"exact", 0xc0490000, 0xc049},
		{"below half", 0x3f807fff, 0x3f80},
		{"above half", 0x3f808001, 0x3f81},
		{"tie to even down", 0x3f808000, 0x3f80},
		{"tie to even up", 0x3f818000, 0x3f82},
		{"negative tie", 0xbf818000, 0xbf82},
		{"carry into exponent", 0x3fffffff, 0x4000},
		{"largest finite rounds to inf", 0x7f7fffff, 0x7f80},
		{"largest bf16 stays", 0x7f7f0000, 0x7f7f},
		{"+inf", 0x7f800000, 0x7f80},
		{"-inf", 0xff800000, 0xff80},
		{"+0", 0, 0},
		{"-0", 0x80000000, 0x8000},
		{"smallest subnormal to 0", 0x00000001, 0x0000},
		{"subnormal tie to even", 0x00018000, 0x0002},
		{"quiet nan", 0x7fc00000, 0x7fc0},
		{"signalling nan low payload", 0x7f800001, 0x7fc0},
		{"nan payload near carry", 0x7fffffff, 0x7fff},
		{"negative nan", 0xff800001, 0xffc0},
	} {
		if got := ToBF16(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("%s: ToBF16(%#08x) = %#04x, want %#04x", c.name, c.in, got, c.want)
		}
	}
}

// TestToBF16Nearest checks ToBF16 against its slow twin, a float64 choice
// between the two bfloat16 values around f, on random bit patterns.
func TestToBF16Nearest(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 1<<20; i++ {
		b := r.Uint32()
		if i%4 == 0 {
			b = b&^0xffff | 0x8000 // exact ties
		}
		f := math.Float32frombits(b)
		if math.IsNaN(float64(f)) {
			continue
		}
		if got, want := ToBF16(f), nearestBF16(f); got != want {
			t.Fatalf("ToBF16(%#08x) = %#04x, want %#04x", b, got, want)
		}
	}
}

// nearestBF16 rounds f to bfloat16 by comparing distances in float64.
func nearestBF16(f float32) uint16 {
	lo := uint16(math.Float32bits(f) >> 16) // truncation: toward zero
	hi := lo + 1                            // the next one away from zero
	x := float64(f)
	dl := math.Abs(x - float64(FromBF16(lo)))
	if lo&0x7fff == 0x7f7f { // above the largest finite lies infinity: compare to 2^128
		bound := math.Copysign(math.Ldexp(1, 128), x)
		if math.Abs(x-bound) < dl || (math.Abs(x-bound) == dl && hi&1 == 0) {
			return hi
		}
		return lo
	}
	if lo&0x7fff == 0x7f80 { // infinity itself
		return lo
	}
	dh := math.Abs(x - float64(FromBF16(hi)))
	if dh < dl || (dh == dl && hi&1 == 0) {
		return hi
	}
	return lo
}

func TestSafetensorsBF16RoundTrip(t *testing.T) {
	vals := []float32{1, -2.5, 3.14159, 1e-3, float32(math.Inf(1)), 65504, float32(math.Copysign(0, -1)), 1.00390625}
	ts := []Tensor{{Name: "w", Shape: []int{2, 4}, Data: vals}, {Name: "s", Shape: []int{}, Data: []float32{0.1}}}
	p := filepath.Join(t.TempDir(), "x.safetensors")
	if err := WriteSafetensorsAs(p, ts, map[string]string{"format": "pt"}, BF16); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	hl := int(b[0]) | int(b[1])<<8
	if len(b) != 8+hl+2*9 || !strings.Contains(string(b[8:8+hl]), `"dtype":"BF16"`) {
		t.Fatalf("file of %d bytes, header %s", len(b), b[8:8+hl])
	}
	got, meta, err := ReadSafetensors(p)
	if err != nil || meta["format"] != "pt" {
		t.Fatalf("read: %v, meta %v", err, meta)
	}
	for k, w := range ts {
		for i, v := range w.Data {
			if g := got[k].Data[i]; math.Float32bits(g) != math.Float32bits(FromBF16(ToBF16(v))) {
				t.Errorf("%s[%d] = %v, want %v rounded to bf16", w.Name, i, g, v)
			}
		}
	}
	if err := WriteSafetensorsAs(p, ts, nil, "F16"); err == nil {
		t.Fatal("dtype F16 accepted")
	}
}
