package main

import (
	"fmt"

	"github.com/intellect-node/intellect-node/train"
	"github.com/intellect-node/intellect-node/train/tokenizer"
)

// checkTokenizer rejects a tokenizer whose ids do not all fit the model.
func checkTokenizer(tok tokenizer.Tokenizer, c train.Config) error {
	if tok.Vocab() > c.Vocab {
		return fmt.Errorf("tokenizer %s has a vocabulary of %d, more than the model's %d", tok.ID(), tok.Vocab(), c.Vocab)
	}
	return nil
}

// loaded is a model with the tokenizer it is run with.
type loaded struct {
	m   *train.Model
	tok tokenizer.Tokenizer
	dir string // the step directory the model came from
}

// loadModelAndTokenizer loads the checkpoint's model and the tokenizer and
// checks they fit together; context > 0 sets the model's context window.
func loadModelAndTokenizer(checkpoint, spec string, context int) (loaded, error) {
	if checkpoint == "" {
		return loaded{}, fmt.Errorf("--checkpoint is required (a step directory, or a --home holding checkpoints)")
	}
	tok, err := tokenizer.Load(spec)
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
	if context != 0 {
		if err := m.SetContext(context); err != nil {
			return loaded{}, fmt.Errorf("--context: %w", err)
		}
	}
	return loaded{m: m, tok: tok, dir: dir}, nil
}
