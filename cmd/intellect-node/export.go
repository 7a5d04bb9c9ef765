package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/intellect-node/intellect-node/node"
	"github.com/intellect-node/intellect-node/train"
)

func init() {
	register("export", "write a checkpoint as a Hugging Face Llama directory", runExport)
}

// exportFlags are the flags of `intellect-node export`.
type exportFlags struct {
	out, checkpoint, dtype, tokenizer string
	force                             bool
}

func runExport(args []string) error {
	var f exportFlags
	fs := newFlagSet("export", "--hf OUT --checkpoint DIR [--dtype bf16|f32] [--tokenizer byte|FILE] [--force]")
	fs.StringVar(&f.out, "hf", "", "output directory for the Hugging Face model (required)")
	fs.StringVar(&f.checkpoint, "checkpoint", "", "checkpoint: a step directory, a directory of step-N directories, or a --home (required)")
	fs.StringVar(&f.dtype, "dtype", "f32", "weight dtype: f32 or bf16 (rounded to nearest even)")
	fs.StringVar(&f.tokenizer, "tokenizer", "byte", "byte (a byte-level tokenizer.json, id = byte) or the path of a tokenizer.json to copy")
	fs.BoolVar(&f.force, "force", false, "replace a non-empty --hf directory")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	opts, err := f.options()
	if err != nil {
		return err
	}
	m, err := train.LoadCheckpointModel(f.checkpoint)
	if err != nil {
		return err
	}
	if bars := progressBars(); bars != nil {
		opts.Progress = func(done, total int64) {
			bars(node.Progress{Work: "export", Done: done, Total: total, Detail: "model.safetensors"})
		}
	}
	if err := train.Export(m, f.out, opts); err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "exported %s (step %d, %d parameters, %s) to %s\n",
		m.Dir, m.Step, len(m.Params), opts.DType, f.out)
	return nil
}

// options checks the flags and returns the export options.
func (f exportFlags) options() (train.ExportOptions, error) {
	if f.out == "" {
		return train.ExportOptions{}, errors.New("--hf OUT is required")
	}
	if f.checkpoint == "" {
		return train.ExportOptions{}, errors.New("--checkpoint DIR is required")
	}
	dt := map[string]train.DType{"f32": train.F32, "float32": train.F32, "bf16": train.BF16, "bfloat16": train.BF16}[strings.ToLower(f.dtype)]
	if dt == "" {
		return train.ExportOptions{}, fmt.Errorf("--dtype %q: want f32 or bf16", f.dtype)
	}
	return train.ExportOptions{DType: dt, Tokenizer: f.tokenizer, Force: f.force}, nil
}
