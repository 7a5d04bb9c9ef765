package corpus

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/intellect-node/intellect-node/train"
)

// writer puts tokenized batches back in order and cuts the two token
// streams (train, held out) into shard files.
type writer struct {
	opts    Options
	m       *Manifest
	p       *progress
	next    int
	pending map[int]batch
	sets    [2]*shardSet // train, held out
}

// shardSet accumulates one stream of tokens into shard files in dir.
type shardSet struct {
	dir   string
	buf   []uint32
	split *Split
}

func newWriter(opts Options, dir string, m *Manifest, p *progress) *writer {
	return &writer{opts: opts, m: m, p: p, pending: map[int]batch{}, sets: [2]*shardSet{
		{dir: filepath.Join(dir, "train"), split: &m.Train},
		{dir: filepath.Join(dir, "heldout"), split: &m.Held},
	}}
}

// collect writes batches in seq order as they arrive, then the last shards.
func (w *writer) collect(ctx context.Context, done <-chan batch) error {
	for {
		select {
		case b, ok := <-done:
			if !ok {
				return w.close()
			}
			w.pending[b.seq] = b
			if err := w.drain(); err != nil {
				return err
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

func (w *writer) drain() error {
	for {
		b, ok := w.pending[w.next]
		if !ok {
			return nil
		}
		delete(w.pending, w.next)
		w.next++
		for _, d := range b.docs {
			if err := w.add(d); err != nil {
				return err
			}
		}
	}
}

// add appends one document and its end-of-text token.
func (w *writer) add(d doc) error {
	set := w.sets[0]
	if d.held {
		set = w.sets[1]
	}
	n := int64(len(d.tokens) + 1)
	src := &w.m.Sources[d.source]
	src.Documents++
	src.Bytes += int64(len(d.text))
	src.Tokens += n
	set.split.Documents++
	set.split.Tokens += n
	set.split.Bytes += int64(len(d.text))
	w.p.tokens.Add(n)
	for _, t := range d.tokens {
		set.buf = append(set.buf, uint32(t))
	}
	set.buf = append(set.buf, uint32(w.opts.Tokenizer.EOT()))
	for len(set.buf) >= w.opts.ShardTokens {
		if err := set.flush(w.opts.ShardTokens, w.opts.Tokenizer.Vocab()); err != nil {
			return err
		}
	}
	return nil
}

// flush writes the first n buffered tokens as the next shard file.
func (s *shardSet) flush(n, vocab int) error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	name := fmt.Sprintf("%06d%s", len(s.split.Shards), train.ShardExt)
	if err := train.WriteShard(filepath.Join(s.dir, name), s.buf[:n], vocab); err != nil {
		return err
	}
	s.split.Shards = append(s.split.Shards, filepath.Base(s.dir)+"/"+name)
	s.buf = append(s.buf[:0], s.buf[n:]...)
	return nil
}

func (w *writer) close() error {
	if len(w.pending) > 0 {
		return fmt.Errorf("corpus: %d batches never written (batch %d missing)", len(w.pending), w.next)
	}
	for _, s := range w.sets {
		if len(s.buf) > 0 {
			if err := s.flush(len(s.buf), w.opts.Tokenizer.Vocab()); err != nil {
				return err
			}
		}
	}
	return nil
}
