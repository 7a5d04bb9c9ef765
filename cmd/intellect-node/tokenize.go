package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/intellect-node/intellect-node/train/corpus"
	"github.com/intellect-node/intellect-node/train/tokenizer"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

func init() {
	register("tokenize", "turn text, JSONL or parquet corpora into token shards for --data", runTokenize)
}

func runTokenize(args []string) error {
	fs := newFlagSet("tokenize", "--tokenizer byte|FILE --out DIR [flags] INPUT...")
	var o corpus.Options
	tok := fs.String("tokenizer", "byte", "`byte`, or a Hugging Face tokenizer.json (GPT-2 / Llama 3 byte-level BPE)")
	out := fs.String("out", "", "output `directory` (must not exist or be empty)")
	fs.Float64Var(&o.HeldOut, "heldout", 0.01, "`fraction` of documents held out for evaluation")
	fs.StringVar(&o.TextField, "text-field", "text", "JSONL field / parquet column holding the text")
	fs.StringVar(&o.Include, "include", "", "read only files whose base name matches this `glob` inside directories (e.g. '*.md')")
	fs.IntVar(&o.Workers, "workers", 0, "tokenizer goroutines (default: all cores; the shards do not depend on it)")
	fs.IntVar(&o.ShardTokens, "shard-tokens", 1<<26, "tokens per shard file")
	inputs, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if o.Tokenizer, err = tokenizer.Load(*tok); err != nil {
		return err
	}
	if *tok != "byte" && *tok != "" {
		o.TokenizerFile = *tok
	}
	o.Progress = tokenizeProgress()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m, err := corpus.Tokenize(ctx, o, *out, inputs)
	if err != nil {
		return err
	}
	if m.Held.Documents == 0 && o.HeldOut > 0 {
		fmt.Fprintf(os.Stderr, "note: no document fell in the held-out %g; evaluation will use the tail 1/64 of each training shard\n", o.HeldOut)
	}
	for _, s := range m.Skipped {
		fmt.Fprintf(os.Stderr, "skipped %s: %s\n", s.Path, s.Why)
	}
	fmt.Printf("%s: %d documents, %d training tokens in %d shards, %d held-out tokens (%d documents); %s, %.1f s (%.0f tokens/s)\n",
		*out, m.Train.Documents+m.Held.Documents, m.Train.Tokens, len(m.Train.Shards), m.Held.Tokens, m.Held.Documents,
		m.Tokenizer.ID, m.Seconds, float64(m.Train.Tokens+m.Held.Tokens)/max(m.Seconds, 1e-9))
	return nil
}

// tokenizeProgress draws a bar (bytes, rate, time left) on a terminal and
// writes a plain line every 10 s elsewhere.
func tokenizeProgress() func(corpus.Progress) {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		last := time.Now()
		return func(p corpus.Progress) {
			if time.Since(last) >= 10*time.Second {
				last = time.Now()
				fmt.Fprintf(os.Stderr, "tokenize: %d of %d bytes, %d tokens, %.0f tokens/s\n",
					p.Bytes, p.TotalBytes, p.Tokens, float64(p.Tokens)/p.Elapsed.Seconds())
			}
		}
	}
	var bar *progressbar.ProgressBar
	return func(p corpus.Progress) {
		if bar == nil {
			bar = progressbar.NewOptions64(p.TotalBytes, progressbar.OptionSetWriter(os.Stderr),
				progressbar.OptionSetDescription("tokenize"), progressbar.OptionShowBytes(true),
				progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionShowElapsedTimeOnFinish(),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }))
		}
		bar.Describe(fmt.Sprintf("tokenize %d tokens (%.0f/s)", p.Tokens, float64(p.Tokens)/max(p.Elapsed.Seconds(), 1e-9)))
		bar.Set64(p.Bytes)
	}
}
