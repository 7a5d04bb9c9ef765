package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/intellect-node/intellect-node/train"
	"github.com/intellect-node/intellect-node/train/tokenizer"
)

func init() {
	register("generate", "continue a prompt with a trained checkpoint", runGenerate)
}

// generateFlags are the flags of `intellect-node generate`.
type generateFlags struct {
	checkpoint, prompt, tokenizer string
	maxTokens, context            int
	sample                        train.SampleOptions
}

func runGenerate(args []string) error { return generate(args, os.Stdout, os.Stderr) }

// generate runs the command, streaming the continuation to out and a summary
// line (checkpoint, tokens, speed) to info.
func generate(args []string, out, info io.Writer) error {
	var f generateFlags
	fs := newFlagSet("generate", "--checkpoint DIR --prompt TEXT [flags]")
	fs.SetOutput(info)
	fs.StringVar(&f.checkpoint, "checkpoint", "", "checkpoint: a step directory, or a train/start --home (newest step)")
	fs.StringVar(&f.prompt, "prompt", "", "text to continue (required)")
	fs.StringVar(&f.tokenizer, "tokenizer", "byte", "tokenizer: byte, or the path of a Hugging Face tokenizer.json")
	fs.IntVar(&f.maxTokens, "max-tokens", 200, "most tokens to generate")
	fs.IntVar(&f.context, "context", 0, "context window in tokens, 1..seq_len (default seq_len); past it the context slides")
	fs.Float64Var(&f.sample.Temperature, "temperature", 0.8, "sampling temperature, ≥ 0; 0 is greedy (argmax)")
	fs.Float64Var(&f.sample.TopP, "top-p", 0.95, "nucleus sampling mass, in (0, 1]; 1 samples from all tokens")
	fs.Uint64Var(&f.sample.Seed, "seed", 0, "seed of the sampler: the same seed gives the same text")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	s, err := train.NewSampler(f.sample)
	if err != nil {
		return err
	}
	l, err := loadModelAndTokenizer(f.checkpoint, f.tokenizer, f.context)
	if err != nil {
		return err
	}
	return f.run(l, s, out, info)
}

func (f generateFlags) check() error {
	switch {
	case f.prompt == "":
		return fmt.Errorf("--prompt is required and must not be empty")
	case f.maxTokens < 1:
		return fmt.Errorf("--max-tokens %d: want ≥ 1", f.maxTokens)
	case f.context < 0:
		return fmt.Errorf("--context %d: want ≥ 1", f.context)
	}
	return f.sample.Validate()
}

// run generates the continuation of f.prompt, writing it to out as it comes.
func (f generateFlags) run(l loaded, s *train.Sampler, out, info io.Writer) error {
	prompt := l.tok.Encode(f.prompt)
	if len(prompt) == 0 {
		return fmt.Errorf("--prompt %q encodes to no tokens", f.prompt)
	}
	w := bufio.NewWriter(out)
	st := streamer{tok: l.tok, w: w}
	start := time.Now()
	ids, err := l.m.Generate(prompt, f.maxTokens, s, l.tok.EOT(), st.add)
	if err == nil {
		err = st.flush()
	}
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	fmt.Fprintf(info, "# %s: %d prompt tokens, %d generated in %.2f s (%.0f tokens/s)\n",
		l.dir, len(prompt), len(ids), secs, float64(len(ids))/secs)
	return nil
}

// streamer writes generated text as it grows. It decodes all ids so far and
// writes what was not written yet, holding back a multi-byte UTF-8
// character cut by a token boundary until a later token completes it.
type streamer struct {
	tok     tokenizer.Tokenizer
	w       *bufio.Writer
	ids     []int32
	written string
}

func (s *streamer) add(id int32) error {
	s.ids = append(s.ids, id)
	text := s.tok.Decode(s.ids)
	if incompleteTail(text) || !strings.HasPrefix(text, s.written) {
		return nil
	}
	if _, err := s.w.WriteString(text[len(s.written):]); err != nil {
		return err
	}
	s.written = text
	return s.w.Flush()
}

// flush writes whatever is left and ends the line.
func (s *streamer) flush() error {
	text := s.tok.Decode(s.ids)
	if strings.HasPrefix(text, s.written) {
		s.w.WriteString(text[len(s.written):])
	}
	s.w.WriteString("\n")
	return s.w.Flush()
}

// incompleteTail reports whether s ends inside a multi-byte UTF-8 character
// that more bytes may complete.
func incompleteTail(s string) bool {
	for i := len(s) - 1; i >= 0 && i >= len(s)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(s[i]) {
			return !utf8.FullRuneInString(s[i:])
		}
	}
	return false
}
