package train

import (
	"fmt"
	"strconv"

	"github.com/intellect-node/intellect-node/train/tokenizer"
)

// Key identifies one training micro-batch. A Source's stream is a pure
// function of the key, so different workers (Worker) draw different data and a
// resumed run (same Step) draws exactly what the uninterrupted run would have.
type Key struct {
	Seed   uint64 // run seed
	Worker uint64 // worker id
	Step   int    // optimizer step, 0-based
	Micro  int    // micro-batch within the step
}

// Source provides training and held-out tokens. Implementations are safe for
// concurrent use by several trainers (they keep no sampling state).
type Source interface {
	// Vocab returns an upper bound (exclusive) of the token ids it produces.
	Vocab() int
	// Train fills dst (rows × width) with the training rows of micro-batch k.
	Train(dst []int32, rows, width int, k Key) error
	// Eval fills dst (rows × width) with held-out batch i; the same i always
	// gives the same tokens, and no held-out text appears in Train's rows.
	Eval(dst []int32, rows, width, i int) error
	// String names the source for logs and checkpoints.
	String() string
}

// ByteTokenizer is the byte-level tokenizer of the embedded corpus and of
// byte shards (tokenizer.Byte).
type ByteTokenizer = tokenizer.Byte

// arithmetic is the embedded default corpus: an endless stream of additions
// "a+b=c\n" with 1–3 digit operands, byte-tokenized. About 1/16 of all (a, b)
// pairs are held out (chosen by hash) and never appear in training; Eval
// batches are held-out pairs of two 3-digit operands (heldOutProblem), so the
// held-out loss measures whether the model learned addition rather than
// memorised the problems. Tokens the model can predict: the syntax and the
// sum's digits.
type arithmetic struct{}

// DefaultSource returns the embedded generated corpus (arithmetic, bytes).
func DefaultSource() Source { return arithmetic{} }

// Vocab returns 256 (bytes).
func (arithmetic) Vocab() int { return 256 }

// String names the corpus.
func (arithmetic) String() string { return "default:arithmetic" }

// AnswerMask marks the targets that are digits of a sum or its newline: with
// inputs (row[:n]) and targets (row[1:]), target i is an answer token when
// the inputs since the last newline contain '='.
func (arithmetic) AnswerMask(inputs []int32, mask []bool) {
	in := false
	for i, tok := range inputs {
		switch tok {
		case '=':
			in = true
		case '\n':
			in = false
		}
		mask[i] = in
	}
}

// answerMasker is implemented by sources whose held-out text has answers
// (the arithmetic corpus), so Eval can report answer accuracy.
type answerMasker interface {
	AnswerMask(inputs []int32, mask []bool)
}

// evalSeed keys the held-out batches; it is part of the corpus definition.
const evalSeed = 0xE7A15EED

// Train fills dst with problems drawn from the key's hash, held-out pairs excluded.
func (a arithmetic) Train(dst []int32, rows, width int, k Key) error {
	if err := checkDst(dst, rows, width); err != nil {
		return err
	}
	for r := 0; r < rows; r++ {
		g := newRNG(mix(k.Seed, k.Worker, uint64(k.Step), uint64(k.Micro), uint64(r)))
		fillProblems(dst[r*width:(r+1)*width], g, false)
	}
	return nil
}

// Eval fills dst with held-out problems of batch i.
func (a arithmetic) Eval(dst []int32, rows, width, i int) error {
	if err := checkDst(dst, rows, width); err != nil {
		return err
	}
	for r := 0; r < rows; r++ {
		g := newRNG(mix(evalSeed, uint64(i), uint64(r)))
		fillProblems(dst[r*width:(r+1)*width], g, true)
	}
	return nil
}

func checkDst(dst []int32, rows, width int) error {
	if rows < 1 || width < 2 || len(dst) < rows*width {
		return fmt.Errorf("%w: batch %d×%d does not fit %d tokens", ErrData, rows, width, len(dst))
	}
	return nil
}

// heldOut reports whether the problem a+b belongs to the held-out split.
func heldOut(a, b int) bool { return mix(uint64(a), uint64(b), 0xB0B)%16 == 0 }

// problem draws operands until the pair's split matches held. A held-out
// problem has two 3-digit operands: see heldOutProblem.
func problem(g *rng, held bool) (int, int) {
	if held {
		return heldOutProblem(g)
	}
	pow := [4]int{1, 10, 100, 1000}
	for {
		a, b := g.intn(pow[1+g.intn(3)]), g.intn(pow[1+g.intn(3)])
		if !heldOut(a, b) {
			return a, b
		}
	}
}

// heldOutProblem draws a held-out pair of two 3-digit operands. Smaller pairs
// are few (100 of one digit each) and come up in training thousands of times
// each, so a model learns which of them never do: held out, they would score
// its knowledge of the split, a loss that rises as training goes on while
// every sum comes out right. Of the 810 000 pairs of 3-digit operands a run
// sees each less than once, so their held-out loss measures addition.
func heldOutProblem(g *rng) (int, int) {
	for {
		a, b := 100+g.intn(900), 100+g.intn(900)
		if heldOut(a, b) {
			return a, b
		}
	}
}

// fillProblems writes problems into row, the first one starting at row[0]
// and the last one cut off at the end of row.
func fillProblems(row []int32, g *rng, held bool) {
	buf := make([]byte, 0, 16)
	for i := 0; i < len(row); {
		a, b := problem(g, held)
		buf = strconv.AppendInt(buf[:0], int64(a), 10)
		buf = append(buf, '+')
		buf = strconv.AppendInt(buf, int64(b), 10)
		buf = append(buf, '=')
		buf = strconv.AppendInt(buf, int64(a+b), 10)
		buf = append(buf, '\n')
		for _, c := range buf {
			if i == len(row) {
				break
			}
			row[i] = int32(c)
			i++
		}
	}
}
