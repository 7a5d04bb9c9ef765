package tokenizer

import (
	"container/heap"

	"github.com/dlclark/regexp2"
)

// bpe is the byte-pair encoder of a tiktoken-style rank table: text is cut
// by the split pattern (regexp2, as tiktoken-go does), a piece that is a
// token is that token, and any other piece is merged pair by pair, always
// the adjacent pair whose merged bytes have the lowest rank, leftmost first.
//
// tiktoken-go's merge loop rescans the whole piece after every merge,
// quadratic in its length: a 50 000-letter piece (a minified file, a
// base64 blob) took a second and a megabyte would take minutes. Here pieces
// up to shortPiece bytes use that scan and longer ones a heap with lazy
// deletion, O(n log n), with the same order of merges (TestLongPieces).
type bpe struct {
	re    *regexp2.Regexp
	ranks map[string]int
}

// shortPiece is the longest piece merged by rescanning.
const shortPiece = 64

func newBPE(pattern string, ranks map[string]int) (*bpe, error) {
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, err
	}
	return &bpe{re: re, ranks: ranks}, nil
}

// encode calls emit with the rank of every token of text, in order.
func (b *bpe) encode(text string, emit func(rank int)) {
	runes := []rune(text)
	m, _ := b.re.FindStringMatch(text)
	for m != nil {
		piece := string(runes[m.Index : m.Index+m.Length])
		if r, ok := b.ranks[piece]; ok {
			emit(r)
		} else {
			b.merge(piece, emit)
		}
		m, _ = b.re.FindNextMatch(m)
	}
}

// merge emits the tokens of a piece that is not a token itself.
func (b *bpe) merge(piece string, emit func(int)) {
	var bounds []int
	if len(piece) <= shortPiece {
		bounds = b.mergeScan(piece)
	} else {
		bounds = b.mergeHeap(piece)
	}
	for i := 0; i+1 < len(bounds); i++ {
		emit(b.ranks[piece[bounds[i]:bounds[i+1]]])
	}
}

// rank returns the rank of piece[lo:hi], or -1 if it is no token.
func (b *bpe) rank(piece string, lo, hi int) int {
	if r, ok := b.ranks[piece[lo:hi]]; ok {
		return r
	}
	return -1
}

// mergeScan merges by rescanning all pairs after each merge; it returns the
// parts' boundaries.
func (b *bpe) mergeScan(piece string) []int {
	bounds := make([]int, len(piece)+1)
	for i := range bounds {
		bounds[i] = i
	}
	for len(bounds) > 2 {
		best, at := -1, -1
		for i := 0; i+2 < len(bounds); i++ {
			if r := b.rank(piece, bounds[i], bounds[i+2]); r >= 0 && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		bounds = append(bounds[:at+1], bounds[at+2:]...)
	}
	return bounds
}

// pair is a candidate merge of the parts starting at lo and mid, ending at hi.
type pair struct{ rank, lo, mid, hi int }

type pairHeap []pair

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(i, j int) bool {
	return h[i].rank < h[j].rank || h[i].rank == h[j].rank && h[i].lo < h[j].lo
}
func (h pairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(pair)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// mergeHeap merges with a heap of candidate pairs ordered by (rank, start);
// a candidate whose parts changed since it was pushed is skipped.
func (b *bpe) mergeHeap(piece string) []int {
	n := len(piece)
	next, prev := make([]int, n), make([]int, n)
	alive := make([]bool, n)
	h := make(pairHeap, 0, n)
	for i := range n {
		next[i], prev[i], alive[i] = i+1, i-1, true
		if i+2 <= n {
			if r := b.rank(piece, i, i+2); r >= 0 {
				h = append(h, pair{r, i, i + 1, i + 2})
			}
		}
	}
	heap.Init(&h)
	push := func(lo int) {
		if lo < 0 || next[lo] >= n {
			return
		}
		mid := next[lo]
		if r := b.rank(piece, lo, next[mid]); r >= 0 {
			heap.Push(&h, pair{r, lo, mid, next[mid]})
		}
	}
	for h.Len() > 0 {
		p := heap.Pop(&h).(pair)
		if !alive[p.lo] || next[p.lo] != p.mid || !alive[p.mid] || next[p.mid] != p.hi {
			continue // stale
		}
		alive[p.mid] = false
		next[p.lo] = p.hi
		if p.hi < n {
			prev[p.hi] = p.lo
		}
		push(prev[p.lo])
		push(p.lo)
	}
	bounds := []int{0}
	for i := 0; i < n; i = next[i] {
		bounds = append(bounds, next[i])
	}
	return bounds
}
