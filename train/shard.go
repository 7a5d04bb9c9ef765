package train

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
)

// Token shard file format (little endian):
//
//	offset 0   [8]byte  magic "ITOKSHD1"
//	offset 8   uint32   token width in bytes: 2 (uint16) or 4 (uint32)
//	offset 12  uint32   vocabulary size (every token is below it)
//	offset 16  uint64   number of tokens n
//	offset 24  [8]byte  reserved, zero
//	offset 32  n tokens
//
// Shards are memory-mapped read-only. ShardExt is the file extension OpenSource
// looks for in a directory.
const (
	shardMagic  = "ITOKSHD1"
	shardHeader = 32
	ShardExt    = ".tok"
)

// ErrShard is wrapped by every error about a malformed shard or mixture file.
var ErrShard = errors.New("train: bad shard")

// WriteShard writes tokens (each < vocab) as a shard file at path, uint16 when
// vocab ≤ 65536, else uint32. The file is written to a temporary name, synced
// and renamed.
func WriteShard(path string, tokens []uint32, vocab int) error {
	if vocab < 1 || int64(vocab) > 1<<32-1 {
		return fmt.Errorf("%w: vocab %d", ErrShard, vocab)
	}
	width := 4
	if vocab <= 1<<16 {
		width = 2
	}
	buf := make([]byte, shardHeader+width*len(tokens))
	copy(buf, shardMagic)
	binary.LittleEndian.PutUint32(buf[8:], uint32(width))
	binary.LittleEndian.PutUint32(buf[12:], uint32(vocab))
	binary.LittleEndian.PutUint64(buf[16:], uint64(len(tokens)))
	for i, t := range tokens {
		if int64(t) >= int64(vocab) {
			return fmt.Errorf("%w: token %d at %d ≥ vocab %d", ErrShard, t, i, vocab)
		}
		if width == 2 {
			binary.LittleEndian.PutUint16(buf[shardHeader+2*i:], uint16(t))
		} else {
			binary.LittleEndian.PutUint32(buf[shardHeader+4*i:], t)
		}
	}
	return writeFileAtomic(path, buf)
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Shard is one memory-mapped token file.
type Shard struct {
	path  string
	data  []byte // the whole file (mapped)
	width int
	vocab int
	n     int
	unmap func() error
}

// OpenShard maps a shard file and checks its header against its size.
func OpenShard(path string) (*Shard, error) {
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("train: open shard: %w", err)
	}
	s, err := parseShard(data)
	if err != nil {
		unmap()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s.path, s.unmap = path, unmap
	return s, nil
}

// parseShard validates the header of a shard image.
func parseShard(data []byte) (*Shard, error) {
	if len(data) < shardHeader || string(data[:8]) != shardMagic {
		return nil, fmt.Errorf("%w: missing header or magic", ErrShard)
	}
	width := int(binary.LittleEndian.Uint32(data[8:]))
	vocab := binary.LittleEndian.Uint32(data[12:])
	n := binary.LittleEndian.Uint64(data[16:])
	if width != 2 && width != 4 {
		return nil, fmt.Errorf("%w: token width %d", ErrShard, width)
	}
	if vocab == 0 || vocab > 1<<31-1 {
		return nil, fmt.Errorf("%w: vocab %d", ErrShard, vocab)
	}
	if n != uint64(len(data)-shardHeader)/uint64(width) || (len(data)-shardHeader)%width != 0 {
		return nil, fmt.Errorf("%w: header says %d tokens, file holds %d bytes of tokens", ErrShard, n, len(data)-shardHeader)
	}
	return &Shard{data: data, width: width, vocab: int(vocab), n: int(n)}, nil
}

// Len returns the number of tokens.
func (s *Shard) Len() int { return s.n }

// Vocab returns the vocabulary size recorded in the header.
func (s *Shard) Vocab() int { return s.vocab }

// Token returns token i (0 ≤ i < Len), or an error if it is not below the
// vocabulary.
func (s *Shard) Token(i int) (int32, error) { return s.token(i) }

// token returns token i, or an error if it is not below the vocabulary.
func (s *Shard) token(i int) (int32, error) {
	var t uint32
	if s.width == 2 {
		t = uint32(binary.LittleEndian.Uint16(s.data[shardHeader+2*i:]))
	} else {
		t = binary.LittleEndian.Uint32(s.data[shardHeader+4*i:])
	}
	if t >= uint32(s.vocab) {
		return 0, fmt.Errorf("%w: %s: token %d at %d ≥ vocab %d", ErrShard, s.path, t, i, s.vocab)
	}
	return int32(t), nil
}

// Close unmaps the shard.
func (s *Shard) Close() error {
	if s.unmap == nil {
		return nil
	}
	err := s.unmap()
	s.unmap = nil
	return err
}

// heldOutFrac is the tail fraction of each shard kept for Eval (at least one window).
const heldOutFrac = 64

// component is one weighted entry of a mixture: a set of shards, and the
// held-out shards when the data was split by document (tokenize's layout).
type component struct {
	name   string
	weight float64
	shards []*Shard
	held   []*Shard
	seen   *atomic.Int64 // training tokens drawn from it
}

// ShardSource samples training windows from memory-mapped shards, optionally
// a weighted mixture of several components. The last 1/64 of every shard is
// held out: Eval reads only there, Train never does. A training row is drawn
// by hashing (seed, worker, step, micro, row) into a component (by weight), a
// shard (by size) and a start position, so the stream is a pure function of the
// key.
type ShardSource struct {
	comps []component
	cum   []float64 // cumulative normalised weights
	vocab int
	name  string
}

// mixtureSpec is the JSON file format of a mixture:
// {"sources": [{"path": "fineweb/", "weight": 0.55}, {"path": "stack.tok", "weight": 0.2}]}
type mixtureSpec struct {
	Sources []struct {
		Name   string  `json:"name"`
		Path   string  `json:"path"`
		Weight float64 `json:"weight"`
	} `json:"sources"`
}

// maxMixture bounds the number of components and shards of a source.
const maxMixture = 4096

// OpenSource opens training data: "default" (or "") is the embedded corpus; a
// .json file is a mixture spec (relative paths resolve against its directory);
// a directory is all its *.tok shards; anything else is one shard file.
func OpenSource(path string) (Source, error) {
	if path == "" || path == "default" {
		return DefaultSource(), nil
	}
	if strings.HasSuffix(path, ".json") {
		return openMixture(path)
	}
	c, err := openComponent(path, 1)
	if err != nil {
		return nil, err
	}
	return newShardSource(path, []component{c})
}

func openMixture(path string) (Source, error) {
	b, err := readFileLimited(path, maxConfigFile)
	if err != nil {
		return nil, fmt.Errorf("train: mixture: %w", err)
	}
	var spec mixtureSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("%w: mixture %s: %v", ErrShard, path, err)
	}
	if len(spec.Sources) == 0 || len(spec.Sources) > maxMixture {
		return nil, fmt.Errorf("%w: mixture %s has %d sources", ErrShard, path, len(spec.Sources))
	}
	var comps []component
	for _, s := range spec.Sources {
		p := s.Path
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(path), p)
		}
		c, err := openComponent(p, s.Weight)
		if err != nil {
			closeComps(comps)
			return nil, err
		}
		if s.Name != "" {
			c.name = s.Name
		}
		comps = append(comps, c)
	}
	return newShardSource(path, comps)
}

func openComponent(path string, weight float64) (component, error) {
	if !(weight > 0) || weight > 1e12 {
		return component{}, fmt.Errorf("%w: %s: weight %v must be positive", ErrShard, path, weight)
	}
	c := component{name: path, weight: weight, seen: new(atomic.Int64)}
	trainFiles, heldFiles, err := shardFiles(path)
	if err != nil {
		return component{}, err
	}
	if c.shards, err = openShards(trainFiles); err != nil {
		return component{}, err
	}
	if c.held, err = openShards(heldFiles); err != nil {
		closeComps([]component{c})
		return component{}, err
	}
	return c, nil
}

// TokenizedManifest is the file that marks a directory written by
// `intellect-node tokenize`: training shards in train/, held-out documents
// in heldout/.
const TokenizedManifest = "manifest.json"

// shardFiles lists a source's shard files: the file itself, a directory's
// *.tok, or a tokenized directory's train/ and heldout/ shards.
func shardFiles(path string) (trainFiles, heldFiles []string, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, fmt.Errorf("train: open source: %w", err)
	}
	if !st.IsDir() {
		return []string{path}, nil, nil
	}
	glob := func(dir string) []string {
		fs, _ := filepath.Glob(filepath.Join(dir, "*"+ShardExt))
		sort.Strings(fs)
		return fs
	}
	trainFiles = glob(path)
	if _, err := os.Stat(filepath.Join(path, TokenizedManifest)); err == nil {
		trainFiles, heldFiles = glob(filepath.Join(path, "train")), glob(filepath.Join(path, "heldout"))
	}
	if len(trainFiles) == 0 || len(trainFiles)+len(heldFiles) > maxMixture {
		return nil, nil, fmt.Errorf("%w: %s: %d shard files (*%s)", ErrShard, path, len(trainFiles), ShardExt)
	}
	return trainFiles, heldFiles, nil
}

func openShards(files []string) ([]*Shard, error) {
	var out []*Shard
	for _, f := range files {
		s, err := OpenShard(f)
		if err != nil {
			closeComps([]component{{shards: out}})
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func closeComps(cs []component) {
	for _, c := range cs {
		for _, s := range append(c.shards, c.held...) {
			s.Close()
		}
	}
}

func newShardSource(name string, comps []component) (*ShardSource, error) {
	src := &ShardSource{comps: comps, name: name}
	var total float64
	for _, c := range comps {
		total += c.weight
		for _, s := range append(c.shards, c.held...) {
			src.vocab = max(src.vocab, s.vocab)
		}
	}
	for _, c := range comps {
		prev := 0.0
		if len(src.cum) > 0 {
			prev = src.cum[len(src.cum)-1]
		}
		src.cum = append(src.cum, prev+c.weight/total)
	}
	return src, nil
}

// Vocab returns the largest vocabulary of its shards.
func (s *ShardSource) Vocab() int { return s.vocab }

// String names the source.
func (s *ShardSource) String() string { return "shards:" + s.name }

// Close unmaps every shard.
func (s *ShardSource) Close() error {
	closeComps(s.comps)
	return nil
}

// split returns the number of training tokens of a shard (the rest is held out).
func split(sh *Shard, width int) (train, held int) {
	held = max(sh.n/heldOutFrac, width)
	return sh.n - held, held
}

// region is the part of a shard windows are drawn from.
type region struct {
	sh         *Shard
	start, end int
}

// regions returns where a component's training or held-out windows lie: its
// held-out shards when it has them, else the tail 1/64 of every shard.
func (c component) regions(width int, held bool) []region {
	var rs []region
	switch {
	case len(c.held) > 0 && held:
		for _, sh := range c.held {
			rs = append(rs, region{sh, 0, sh.n})
		}
	case len(c.held) > 0:
		for _, sh := range c.shards {
			rs = append(rs, region{sh, 0, sh.n})
		}
	default:
		for _, sh := range c.shards {
			tr, _ := split(sh, width)
			if held {
				rs = append(rs, region{sh, tr, sh.n})
			} else {
				rs = append(rs, region{sh, 0, tr})
			}
		}
	}
	return rs
}

// TokensBySource returns the training tokens drawn so far from each source
// (mixture component), by name.
func (s *ShardSource) TokensBySource() map[string]int64 {
	m := make(map[string]int64, len(s.comps))
	for _, c := range s.comps {
		m[c.name] += c.seen.Load()
	}
	return m
}

// Train fills dst with rows × width training tokens for key k.
func (s *ShardSource) Train(dst []int32, rows, width int, k Key) error {
	if err := checkDst(dst, rows, width); err != nil {
		return err
	}
	for r := 0; r < rows; r++ {
		g := newRNG(mix(k.Seed, k.Worker, uint64(k.Step), uint64(k.Micro), uint64(r), 0x5A4D))
		if err := s.window(dst[r*width:(r+1)*width], g, false); err != nil {
			return err
		}
	}
	return nil
}

// Eval fills dst with held-out batch i.
func (s *ShardSource) Eval(dst []int32, rows, width, i int) error {
	if err := checkDst(dst, rows, width); err != nil {
		return err
	}
	for r := 0; r < rows; r++ {
		g := newRNG(mix(evalSeed, uint64(i), uint64(r), 0x5A4D))
		if err := s.window(dst[r*width:(r+1)*width], g, true); err != nil {
			return err
		}
	}
	return nil
}

// window copies one random window from the train or held-out region.
func (s *ShardSource) window(row []int32, g *rng, held bool) error {
	u := g.float()
	ci := sort.SearchFloat64s(s.cum, u)
	ci = min(ci, len(s.comps)-1)
	c := s.comps[ci]
	width := len(row)
	rs := c.regions(width, held)
	total := 0
	for _, r := range rs {
		total += max(r.end-r.start-width+1, 0) // possible start positions
	}
	if total == 0 {
		return fmt.Errorf("%w: %s has no room for a %d-token window", ErrData, c.name, width)
	}
	pos := g.intn(total)
	for _, r := range rs {
		n := max(r.end-r.start-width+1, 0)
		if pos >= n {
			pos -= n
			continue
		}
		for j := range row {
			t, err := r.sh.token(r.start + pos + j)
			if err != nil {
				return err
			}
			row[j] = t
		}
		if !held {
			c.seen.Add(int64(width))
		}
		return nil
	}
	panic("train: window position out of range") // sizes sum to total
}

// MixtureEntry is one component of a data source as a run manifest records
// it: its name (the mixture spec's name, else its path) and its weight.
type MixtureEntry struct {
	Name   string  `json:"name"`
	Weight float64 `json:"weight"`
}

// Mixture returns the components of s in order.
func (s *ShardSource) Mixture() []MixtureEntry {
	m := make([]MixtureEntry, len(s.comps))
	for i, c := range s.comps {
		m[i] = MixtureEntry{Name: c.name, Weight: c.weight}
	}
	return m
}
