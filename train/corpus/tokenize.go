package corpus

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/intellect-node/intellect-node/train"
	"github.com/intellect-node/intellect-node/train/tokenizer"
)

// Options say how Tokenize reads and splits a corpus.
type Options struct {
	Tokenizer     tokenizer.Tokenizer
	TokenizerFile string  // copied beside the shards as tokenizer.json; "" for byte
	HeldOut       float64 // fraction of documents held out, by a hash of their place
	TextField     string  // JSONL field / parquet column; default "text"
	Include       string  // base-name glob for files inside directories
	Workers       int     // default GOMAXPROCS; the output does not depend on it
	ShardTokens   int     // tokens per shard file; default 1<<26
	// Progress, if set, is called about every 200 ms and at the end.
	Progress func(Progress)
}

// Progress reports how far Tokenize is.
type Progress struct {
	Bytes, TotalBytes int64 // input bytes read (compressed as on disk)
	Tokens            int64
	Elapsed           time.Duration
}

// Manifest is written as manifest.json beside the shards.
type Manifest struct {
	Format    string    `json:"format"`
	Tokenizer TokInfo   `json:"tokenizer"`
	HeldOut   float64   `json:"heldout_fraction"`
	TextField string    `json:"text_field"`
	Sources   []Source  `json:"sources"`
	Train     Split     `json:"train"`
	Held      Split     `json:"heldout"`
	Skipped   []Skipped `json:"skipped,omitempty"`
	Seconds   float64   `json:"seconds"`
}

// TokInfo names the tokenizer the shards were made with.
type TokInfo struct {
	ID    string `json:"id"`
	Vocab int    `json:"vocab"`
	EOT   int32  `json:"eot"`
	File  string `json:"file,omitempty"` // tokenizer.json beside the manifest
}

// Source counts what one input argument gave.
type Source struct {
	Path      string `json:"path"`
	Files     int    `json:"files"`
	Documents int64  `json:"documents"`
	Bytes     int64  `json:"bytes"` // UTF-8 bytes of the documents' text
	Tokens    int64  `json:"tokens"`
}

// Split counts one of the two shard sets.
type Split struct {
	Documents int64    `json:"documents"`
	Tokens    int64    `json:"tokens"`
	Bytes     int64    `json:"bytes"`
	Shards    []string `json:"shards"`
}

// Skipped is an input file that is not text.
type Skipped struct {
	Path string `json:"path"`
	Why  string `json:"why"`
}

// ManifestFormat is the Format of manifests this package writes.
const ManifestFormat = "intellect-node/tokenized/1"

// doc is one document on its way through the pipeline.
type doc struct {
	text   string
	source int
	held   bool
	tokens []int32
}

// batch is a run of consecutive documents; seq orders batches.
type batch struct {
	seq  int
	docs []doc
}

const batchBytes = 1 << 20

// Tokenize reads inputs, tokenizes them and writes out/train/*.tok,
// out/heldout/*.tok, out/manifest.json (and out/tokenizer.json). out must not
// exist or be empty; it is written under a temporary name and renamed at the
// end, so a failed run leaves nothing behind.
func Tokenize(ctx context.Context, opts Options, out string, inputs []string) (*Manifest, error) {
	opts = withDefaults(opts)
	if err := checkOptions(opts, out, inputs); err != nil {
		return nil, err
	}
	files, err := listFiles(inputs, opts.Include)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(out)), "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	m, err := run(ctx, opts, files, inputs, tmp)
	if err != nil {
		return nil, err
	}
	if err := finish(opts, m, tmp, out); err != nil {
		return nil, err
	}
	return m, nil
}

func withDefaults(o Options) Options {
	if o.TextField == "" {
		o.TextField = "text"
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.ShardTokens <= 0 {
		o.ShardTokens = 1 << 26
	}
	return o
}

func checkOptions(o Options, out string, inputs []string) error {
	switch {
	case o.Tokenizer == nil:
		return fmt.Errorf("%w: no tokenizer", ErrInput)
	case len(inputs) == 0:
		return fmt.Errorf("%w: no input files or directories", ErrInput)
	case !(o.HeldOut >= 0 && o.HeldOut < 1):
		return fmt.Errorf("%w: --heldout %v, want 0 ≤ fraction < 1", ErrInput, o.HeldOut)
	case o.ShardTokens < 1024:
		return fmt.Errorf("%w: shard size %d tokens, want ≥ 1024", ErrInput, o.ShardTokens)
	case out == "":
		return fmt.Errorf("%w: no output directory (--out)", ErrInput)
	}
	if ents, err := os.ReadDir(out); err == nil && len(ents) > 0 {
		return fmt.Errorf("%w: --out %s exists and is not empty", ErrInput, out)
	}
	return nil
}

// isHeld decides by document, from where it is: the same documents are held
// out whatever the order of work.
func isHeld(frac float64, rel string, index int64) bool {
	if frac == 0 {
		return false
	}
	h := sha256.New()
	h.Write([]byte(rel))
	binary.Write(h, binary.LittleEndian, index)
	u := binary.LittleEndian.Uint64(h.Sum(nil))
	return float64(u>>11)/(1<<53) < frac
}

// run is the pipeline: one reader in file order, Workers tokenizers, one
// writer that puts batches back in order.
func run(ctx context.Context, opts Options, files []file, inputs []string, dir string) (*Manifest, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p := newProgress(opts, files)
	defer p.stop()
	todo, done := make(chan batch, opts.Workers), make(chan batch, opts.Workers)
	m := newManifest(opts, inputs)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(todo)
		if err := readAll(ctx, opts, files, todo, p, m); err != nil {
			cancel(err)
		}
	}()
	var workers sync.WaitGroup
	for range opts.Workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			encode(ctx, opts.Tokenizer, todo, done)
		}()
	}
	go func() { workers.Wait(); close(done) }()
	werr := newWriter(opts, dir, m, p).collect(ctx, done)
	if werr != nil {
		cancel(werr)
	}
	for range done { // let the workers end
	}
	wg.Wait()
	if werr != nil {
		return nil, werr
	}
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	m.Seconds = p.elapsed().Seconds()
	return m, nil
}

func newManifest(opts Options, inputs []string) *Manifest {
	m := &Manifest{Format: ManifestFormat, HeldOut: opts.HeldOut, TextField: opts.TextField,
		Tokenizer: TokInfo{ID: opts.Tokenizer.ID(), Vocab: opts.Tokenizer.Vocab(), EOT: opts.Tokenizer.EOT()}}
	for _, in := range inputs {
		m.Sources = append(m.Sources, Source{Path: in})
	}
	return m
}

// readAll reads every file's documents into batches of about batchBytes.
func readAll(ctx context.Context, opts Options, files []file, todo chan<- batch, p *progress, m *Manifest) error {
	b := batch{}
	send := func() error {
		select {
		case todo <- b:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		b = batch{seq: b.seq + 1}
		return nil
	}
	size := 0
	for _, f := range files {
		var index int64
		err := readDocs(f, opts.TextField, p.read, func(text string) error {
			b.docs = append(b.docs, doc{text: text, source: f.source, held: isHeld(opts.HeldOut, f.rel, index)})
			index++
			if size += len(text); size < batchBytes {
				return nil
			}
			size = 0
			return send()
		})
		if errors.Is(err, errSkip) {
			m.Skipped = append(m.Skipped, Skipped{Path: f.path, Why: "binary (NUL bytes or not UTF-8)"})
			continue
		}
		if err != nil {
			return err
		}
		m.Sources[f.source].Files++
	}
	if len(b.docs) == 0 {
		return nil
	}
	return send()
}

func encode(ctx context.Context, tok tokenizer.Tokenizer, todo <-chan batch, done chan<- batch) {
	for b := range todo {
		for i := range b.docs {
			b.docs[i].tokens = tok.Encode(b.docs[i].text)
		}
		select {
		case done <- b:
		case <-ctx.Done():
			return
		}
	}
}

// finish writes the manifest and the tokenizer file, then moves the
// directory into place.
func finish(opts Options, m *Manifest, tmp, out string) error {
	if m.Train.Tokens == 0 {
		return fmt.Errorf("%w: no text found (every file empty or skipped)", ErrInput)
	}
	if opts.TokenizerFile != "" {
		b, err := os.ReadFile(opts.TokenizerFile)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(tmp, "tokenizer.json"), b, 0o644); err != nil {
			return err
		}
		m.Tokenizer.File = "tokenizer.json"
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, train.TokenizedManifest), append(b, '\n'), 0o644); err != nil {
		return err
	}
	os.Remove(out) // an empty directory, if any (checked before)
	return os.Rename(tmp, out)
}

// ReadManifest reads the manifest of a tokenized directory.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, train.TokenizedManifest))
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil || m.Format != ManifestFormat {
		return nil, fmt.Errorf("%w: %s: not a manifest of format %s (%v)", ErrInput, dir, ManifestFormat, err)
	}
	return &m, nil
}

// progress counts bytes read and tokens written and reports them.
type progress struct {
	bytes, tokens atomic.Int64
	total         int64
	start         time.Time
	report        func(Progress)
	quit          chan struct{}
	wg            sync.WaitGroup
}

func newProgress(opts Options, files []file) *progress {
	p := &progress{start: time.Now(), report: opts.Progress, quit: make(chan struct{})}
	for _, f := range files {
		p.total += f.size
	}
	if p.report != nil {
		p.wg.Add(1)
		go p.loop()
	}
	return p
}

func (p *progress) read(n int64)           { p.bytes.Add(n) }
func (p *progress) elapsed() time.Duration { return time.Since(p.start) }

func (p *progress) snapshot() Progress {
	return Progress{Bytes: p.bytes.Load(), TotalBytes: p.total, Tokens: p.tokens.Load(), Elapsed: p.elapsed()}
}

func (p *progress) loop() {
	defer p.wg.Done()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			p.report(p.snapshot())
		case <-p.quit:
			p.report(p.snapshot())
			return
		}
	}
}

func (p *progress) stop() {
	close(p.quit)
	p.wg.Wait()
}
