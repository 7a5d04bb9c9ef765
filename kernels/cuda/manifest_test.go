package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestPTXDefinesKernels checks that each embedded PTX defines every kernel the
// Go side launches, and nothing unexpected is missing from the manifest.
func TestPTXDefinesKernels(t *testing.T) {
	for _, cc := range [][2]int{{8, 0}, {9, 0}, {10, 0}} {
		ptx, err := PTX(cc[0], cc[1])
		if err != nil {
			t.Fatal(err)
		}
		got := PTXEntries(ptx)
		for _, k := range Kernels {
			if !slices.Contains(got, k) {
				t.Errorf("sm %v PTX lacks kernel %s", cc, k)
			}
		}
		for _, k := range got {
			if !slices.Contains(Kernels, k) {
				t.Errorf("sm %v PTX defines %s, which Kernels does not list", cc, k)
			}
		}
	}
	if _, err := PTX(7, 5); err == nil {
		t.Error("PTX(7, 5) succeeded; Turing has no bf16 tensor cores and must be refused")
	}
}

// TestPTXTargets checks that each PTX was compiled for the architecture its
// name says (nvcc writes `.target sm_NN`).
func TestPTXTargets(t *testing.T) {
	for name, ptx := range map[string]string{"sm_80": ptxSM80, "sm_90": ptxSM90} {
		if !strings.Contains(ptx, "\n.target "+name) {
			t.Errorf("PTX for %s lacks `.target %s`", name, name)
		}
	}
}

// srcHash is the recipe of build.sh's src_hash: SHA-256 over name + "\n" +
// contents of each file of src/, in byte order of names.
func srcHash(t *testing.T) string {
	t.Helper()
	ents, err := os.ReadDir("src")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("src", n))
		if err != nil {
			t.Fatal(err)
		}
		h.Write([]byte(n + "\n"))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestPTXIsFresh fails when src/*.cu changed without `kernels/cuda/build.sh ptx`.
func TestPTXIsFresh(t *testing.T) {
	want := "// intellect-node src-sha256 " + srcHash(t)
	for name, ptx := range map[string]string{"sm_80": ptxSM80, "sm_90": ptxSM90} {
		first, _, _ := strings.Cut(ptx, "\n")
		if first != want {
			t.Errorf("PTX %s is stale: first line %q, sources hash to %q; run kernels/cuda/build.sh ptx", name, first, want)
		}
	}
}

func TestAttnKernel(t *testing.T) {
	for _, hd := range AttnHeadDims {
		for _, part := range []string{"fwd", "bwd_dq", "bwd_dkdv"} {
			for _, tc := range []bool{false, true} {
				name, err := AttnKernel(part, hd, tc)
				if err != nil || !slices.Contains(Kernels, name) {
					t.Errorf("AttnKernel(%s, %d, %v) = %q, %v", part, hd, tc, name, err)
				}
			}
			// H100/H200 allow 227 KB of shared memory per block (A100: 163 KB,
			// enough for all but hd 128's dk/dv).
			if n := AttnTCSmem(part, hd); n <= 48<<10 || n > 227<<10 {
				t.Errorf("AttnTCSmem(%s, %d) = %d bytes, want in (48 KB, 227 KB]", part, hd, n)
			}
		}
	}
	if _, err := AttnKernel("fwd", 96, false); err == nil {
		t.Error("AttnKernel(fwd, 96) succeeded; no such instantiation")
	}
}

// TestAttnTCSmemMatchesC pins AttnTCSmem to the TC<HD>::FWD/DQ/DKDV values of
// src/attention_tc.cu, printed by a host program compiled with nvcc 11.8
// (`#include "attention_tc.cu"` + printf). Change both together.
func TestAttnTCSmemMatchesC(t *testing.T) {
	want := map[int][3]int{32: {51200, 56320, 75264}, 64: {71680, 80896, 108032}, 128: {112640, 130048, 173568}}
	for hd, w := range want {
		for i, part := range []string{"fwd", "bwd_dq", "bwd_dkdv"} {
			if got := AttnTCSmem(part, hd); got != w[i] {
				t.Errorf("AttnTCSmem(%s, %d) = %d, C says %d", part, hd, got, w[i])
			}
		}
	}
}
