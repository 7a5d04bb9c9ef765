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
	"swiglu_forward", "swiglu_backward", "rope", "adamw", "sumsq", "scale_f32",
	"rmsnorm_forward", "rmsnorm_backward_dx", "rmsnorm_backward_dw",
	"xent", "sum_f32", "attn_bwd_d",
	"attn_fwd_hd32", "attn_bwd_dq_hd32", "attn_bwd_dkdv_hd32",
	"attn_fwd_hd64", "attn_bwd_dq_hd64", "attn_bwd_dkdv_hd64",
	"attn_fwd_hd128", "attn_bwd_dq_hd128", "attn_bwd_dkdv_hd128",
	"quant_int8", "dequant_int8",
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
// ("fwd", "bwd_dq" or "bwd_dkdv") for head size hd.
func AttnKernel(part string, hd int) (string, error) {
	for _, d := range AttnHeadDims {
		if d == hd {
			return fmt.Sprintf("attn_%s_hd%d", part, hd), nil
		}
	}
	return "", fmt.Errorf("%w: attention head size %d (have %v)", ErrUnsupported, hd, AttnHeadDims)
}
