package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"text/tabwriter"
	"time"
)

func init() {
	register("score", "loss, perplexity and bits per byte of a checkpoint on text files", runScore)
}

// maxScoreBytes bounds the size of one scored file.
const maxScoreBytes = 1 << 30

// scoreResult is the score of one file, or of all (the JSON output).
type scoreResult struct {
	File        string  `json:"file,omitempty"`
	Tokens      int     `json:"tokens"`    // tokens predicted: all but the first of each file
	Bytes       int     `json:"bytes"`     // UTF-8 bytes of the text
	Nats        float64 `json:"loss_nats"` // summed next-token cross-entropy
	MeanLoss    float64 `json:"mean_loss"` // nats per predicted token
	Perplexity  float64 `json:"perplexity"`
	BitsPerByte float64 `json:"bits_per_byte"` // Nats / ln 2 / Bytes
}

// scoreReport is the whole output of `score --json`.
type scoreReport struct {
	Checkpoint string `json:"checkpoint"`
	Tokenizer  string `json:"tokenizer"`
	scoreResult
	Files []scoreResult `json:"files"`
}

func (r *scoreResult) finish() {
	r.MeanLoss = r.Nats / float64(r.Tokens)
	r.Perplexity = math.Exp(r.MeanLoss)
	r.BitsPerByte = r.Nats / math.Ln2 / float64(r.Bytes)
}

func runScore(args []string) error { return score(args, os.Stdin, os.Stdout, os.Stderr) }

// score runs the command: FILE "-" is read from stdin; the results go to out.
func score(args []string, stdin io.Reader, out, info io.Writer) error {
	var ckpt, spec string
	var asJSON bool
	var context int
	fs := newFlagSet("score", "--checkpoint DIR [--tokenizer byte|FILE] [--json] FILE... (- is stdin)")
	fs.SetOutput(info)
	fs.StringVar(&ckpt, "checkpoint", "", "checkpoint: a step directory, or a train/start --home (newest step)")
	fs.StringVar(&spec, "tokenizer", "byte", "tokenizer: byte, or the path of a Hugging Face tokenizer.json")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object")
	fs.IntVar(&context, "context", 0, "window in tokens, 1..seq_len (default seq_len): windows of context+1 tokens")
	files, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no FILE to score (give paths, or - for stdin)")
	}
	if context < 0 {
		return fmt.Errorf("--context %d: want ≥ 1", context)
	}
	l, err := loadModelAndTokenizer(ckpt, spec, context)
	if err != nil {
		return err
	}
	rep, err := scoreFiles(l, files, stdin, info)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return printScores(out, rep)
}

// scoreFiles scores each file and all of them together.
func scoreFiles(l loaded, files []string, stdin io.Reader, info io.Writer) (scoreReport, error) {
	rep := scoreReport{Checkpoint: l.dir, Tokenizer: l.tok.ID()}
	start := time.Now()
	for _, name := range files {
		text, err := readInput(name, stdin)
		if err != nil {
			return rep, err
		}
		tokens := l.tok.Encode(string(text))
		nats, n, err := l.m.Score(tokens)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", name, err)
		}
		if n == 0 {
			return rep, fmt.Errorf("%s: %d tokens: too short to score (need 2)", name, len(tokens))
		}
		r := scoreResult{File: name, Tokens: n, Bytes: len(text), Nats: nats}
		r.finish()
		rep.Files = append(rep.Files, r)
		rep.Tokens, rep.Bytes, rep.Nats = rep.Tokens+n, rep.Bytes+len(text), rep.Nats+nats
	}
	rep.finish()
	secs := time.Since(start).Seconds()
	fmt.Fprintf(info, "# %s: %d tokens scored in %.2f s (%.0f tokens/s)\n", l.dir, rep.Tokens, secs, float64(rep.Tokens)/secs)
	return rep, nil
}

// readInput reads a file, or stdin for "-", up to maxScoreBytes.
func readInput(name string, stdin io.Reader) ([]byte, error) {
	if name != "-" {
		return readSmallFile(name, maxScoreBytes)
	}
	b, err := io.ReadAll(io.LimitReader(stdin, maxScoreBytes+1))
	if err == nil && len(b) > maxScoreBytes {
		err = fmt.Errorf("over %d bytes", maxScoreBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("stdin: %w", err)
	}
	return b, nil
}

// printScores prints a table: one row per file, then the total.
func printScores(out io.Writer, rep scoreReport) error {
	w := tabwriter.NewWriter(out, 0, 2, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "file\ttokens\tbytes\tmean_loss\tperplexity\tbits_per_byte\t")
	row := func(name string, r scoreResult) {
		fmt.Fprintf(w, "%s\t%d\t%d\t%.4f\t%.3f\t%.4f\t\n", name, r.Tokens, r.Bytes, r.MeanLoss, r.Perplexity, r.BitsPerByte)
	}
	for _, r := range rep.Files {
		row(r.File, r)
	}
	if len(rep.Files) > 1 {
		row("all", rep.scoreResult)
	}
	return w.Flush()
}
