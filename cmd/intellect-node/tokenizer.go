package main

import (
	"fmt"

	"github.com/intellect-node/intellect-node/train"
)

// tokenizer has the method set of train/tokenizer.Tokenizer, which is on its
// way to main; generate and score are written against it.
type tokenizer interface {
	ID() string                 // names the tokenizer, e.g. "byte"
	Vocab() int                 // ids are in [0, Vocab)
	Encode(text string) []int32 // text to ids
	Decode(ids []int32) string  // ids to text
	EOT() int32                 // the end-of-text id
}

// byteTokenizer is train.ByteTokenizer with the id "byte" and end-of-text 0.
type byteTokenizer struct{ train.ByteTokenizer }

func (byteTokenizer) ID() string { return "byte" }
func (byteTokenizer) EOT() int32 { return 0 }

// loadTokenizer returns the tokenizer spec names: "byte" (one token per
// byte). Hugging Face tokenizer.json files come with train/tokenizer.
func loadTokenizer(spec string) (tokenizer, error) {
	if spec == "byte" {
		return byteTokenizer{}, nil
	}
	return nil, fmt.Errorf("--tokenizer %q: only \"byte\" is supported by this build (tokenizer.json files need train/tokenizer)", spec)
}

// checkTokenizer rejects a tokenizer whose ids do not all fit the model.
func checkTokenizer(tok tokenizer, c train.Config) error {
	if tok.Vocab() > c.Vocab {
		return fmt.Errorf("tokenizer %s has a vocabulary of %d, more than the model's %d", tok.ID(), tok.Vocab(), c.Vocab)
	}
	return nil
}

// loaded is a model with the tokenizer it is run with.
type loaded struct {
	m   *train.Model
	tok tokenizer
	dir string // the step directory the model came from
}

// loadModelAndTokenizer loads the checkpoint's model and the tokenizer and
// checks they fit together.
func loadModelAndTokenizer(checkpoint, spec string) (loaded, error) {
	if checkpoint == "" {
		return loaded{}, fmt.Errorf("--checkpoint is required (a step directory, or a --home holding checkpoints)")
	}
	tok, err := loadTokenizer(spec)
	if err != nil {
		return loaded{}, err
	}
	dir, err := train.ResolveCheckpoint(checkpoint)
	if err != nil {
		return loaded{}, err
	}
	m, err := train.LoadModel(dir)
	if err != nil {
		return loaded{}, err
	}
	if err := checkTokenizer(tok, m.Config()); err != nil {
		return loaded{}, err
	}
	return loaded{m: m, tok: tok, dir: dir}, nil
}
