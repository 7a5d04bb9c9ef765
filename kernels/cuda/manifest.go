package cuda

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"
)

// The PTX that kernels/cuda/build.sh ptx generates from src/kernels.cu, one per
// virtual architecture. The driver JIT-compiles PTX for the device it runs on
// (and for newer architectures than the one named), so sm_80 covers A100 and
// anything newer; sm_90 is preferred on Hopper and later.
var (
	//go:embed ptx/kernels_sm80.ptx
	ptxSM80 string
	//go:embed ptx/kernels_sm90.ptx
	ptxSM90 string
)

// ErrUnsupported reports a device or a shape the CUDA backend does not handle.
var ErrUnsupported = errors.New("cuda: unsupported")

// Kernels lists, in a fixed order, every kernel entry point the Go side
// launches. The embedded PTX must define each (TestPTXDefinesKernels).
var Kernels = []string{
	"cast_f32_bf16", "cast_bf16_f32", "embed_forward", "embed_backward",
	"swiglu_forward", "swiglu_backward", "rope", "adamw", "sumsq_partial", "sum_f64", "scale_f32",
	"muon_momentum", "muon_normalize", "muon_update",
	"rmsnorm_forward", "rmsnorm_backward_dx", "rmsnorm_backward_dw",
	"xent", "sum_f32", "attn_bwd_d",
	"attn_fwd_hd32", "attn_bwd_dq_hd32", "attn_bwd_dkdv_hd32",
	"attn_fwd_hd64", "attn_bwd_dq_hd64", "attn_bwd_dkdv_hd64",
	"attn_fwd_hd128", "attn_bwd_dq_hd128", "attn_bwd_dkdv_hd128",
	"quant_int8", "dequant_int8",
	"attn_fwd_tc_hd32", "attn_bwd_dq_tc_hd32", "attn_bwd_dkdv_tc_hd32", "attn_tc_smem_hd32",
	"attn_fwd_tc_hd64", "attn_bwd_dq_tc_hd64", "attn_bwd_dkdv_tc_hd64", "attn_tc_smem_hd64",
	"attn_fwd_tc_hd128", "attn_bwd_dq_tc_hd128", "attn_bwd_dkdv_tc_hd128", "attn_tc_smem_hd128",
}

// AttnHeadDims are the head sizes the attention kernels are instantiated for.
var AttnHeadDims = []int{32, 64, 128}

// AttnTile is the number of query (or key) rows one attention block handles;
// it is TILE in src/attention.cu and the block size of every attention launch.
const AttnTile = 64

// PTX returns the embedded PTX for a device of compute capability major.minor:
// sm_90 PTX for 9.0 and newer, sm_80 PTX for 8.x. Older devices (no bf16
// tensor cores) are not supported.
func PTX(major, minor int) (string, error) {
	switch {
	case major >= 9:
		return ptxSM90, nil
	case major == 8:
		return ptxSM80, nil
	}
	return "", fmt.Errorf("%w: compute capability %d.%d, need ≥ 8.0", ErrUnsupported, major, minor)
}

// PTXEntries returns the names of the kernels a PTX module defines
// (its `.visible .entry name(` lines).
func PTXEntries(ptx string) []string {
	var names []string
	for _, line := range strings.Split(ptx, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), ".visible .entry ")
		if !ok {
			continue
		}
		if i := strings.IndexByte(rest, '('); i > 0 {
			names = append(names, rest[:i])
		}
	}
	return names
}

// AttnKernel returns the name of the attention kernel of the given part
// ("fwd", "bwd_dq" or "bwd_dkdv") for head size hd: the CUDA-core reference
// kernels of src/attention.cu, or with tc the tensor-core kernels of
// src/attention_tc.cu.
func AttnKernel(part string, hd int, tc bool) (string, error) {
	for _, d := range AttnHeadDims {
		if d == hd {
			if tc {
				return fmt.Sprintf("attn_%s_tc_hd%d", part, hd), nil
			}
			return fmt.Sprintf("attn_%s_hd%d", part, hd), nil
		}
	}
	return "", fmt.Errorf("%w: attention head size %d (have %v)", ErrUnsupported, hd, AttnHeadDims)
}

// AttnTCThreads is the block size of the tensor-core attention kernels (4 warps).
const AttnTCThreads = 128

// AttnTCSmem returns the dynamic shared memory, in bytes, that the
// tensor-core attention kernel of part ("fwd", "bwd_dq", "bwd_dkdv") needs for
// head size hd: the TC<HD> sizes of src/attention_tc.cu (the GPU test checks
// them against the attn_tc_smem_hd* kernels; the kernels trap if given less).
func AttnTCSmem(part string, hd int) int {
	const rows = 64
	tile := rows * (hd + 8) * 2
	s := rows * (rows + 4) * 4
	p := rows * (rows + 8) * 2
	o := rows * (hd + 4) * 4
	switch part {
	case "fwd":
		return 3*tile + s + p + o
	case "bwd_dq":
		return 4*tile + s + p + o
	case "bwd_dkdv":
		return 4*tile + s + 2*p + 2*o + 2*rows*4
	}
	return 0
}
