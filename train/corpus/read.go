// Package corpus turns text corpora into the token shards train reads:
// plain text files and directories, JSON lines and parquet (a string column,
// as Hugging Face datasets ship them), each optionally gzip or zstd
// compressed, tokenized in parallel into the same shards whatever the number
// of cores, documents separated by the tokenizer's end-of-text id, a held-out
// split by document, and a manifest beside the shards.
package corpus

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go"
)

// ErrInput is wrapped by every error about an input file that cannot be read
// as a corpus.
var ErrInput = errors.New("corpus: bad input")

// Limits on what one input may hold.
const (
	maxTextFile = 1 << 30  // bytes of one plain-text document
	maxLine     = 64 << 20 // bytes of one JSON line
)

// file is one input file and the input argument it came from.
type file struct {
	path   string // as found
	rel    string // relative to its input argument; keys the held-out split
	source int    // index of the input argument
	size   int64
}

// format of a file, from its name once .gz/.zst is taken off.
type format int

const (
	formatText format = iota
	formatJSONL
	formatParquet
)

func formatOf(name string) (f format, compression string) {
	lower := strings.ToLower(name)
	for _, ext := range []string{".gz", ".zst", ".zstd"} {
		if strings.HasSuffix(lower, ext) {
			compression, lower = ext, strings.TrimSuffix(lower, ext)
			break
		}
	}
	switch {
	case strings.HasSuffix(lower, ".jsonl"), strings.HasSuffix(lower, ".ndjson"):
		return formatJSONL, compression
	case strings.HasSuffix(lower, ".parquet"):
		return formatParquet, compression
	}
	return formatText, compression
}

// listFiles expands the inputs into files in a fixed order: each input in
// turn, a directory walked in lexical order, hidden entries skipped, base
// names matched against include (a filepath.Match glob) when it is set.
func listFiles(inputs []string, include string) ([]file, error) {
	if include != "" {
		if _, err := filepath.Match(include, ""); err != nil {
			return nil, fmt.Errorf("%w: --include %q: %v", ErrInput, include, err)
		}
	}
	var out []file
	for i, in := range inputs {
		n := len(out)
		err := filepath.WalkDir(in, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			hidden := path != in && strings.HasPrefix(d.Name(), ".")
			if d.IsDir() && hidden {
				return filepath.SkipDir
			}
			if d.IsDir() || hidden || !d.Type().IsRegular() && path != in {
				return nil
			}
			if ok, _ := filepath.Match(include, d.Name()); include != "" && !ok && path != in {
				return nil
			}
			st, err := d.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(in, path)
			out = append(out, file{path: path, rel: filepath.ToSlash(rel), source: i, size: st.Size()})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInput, err)
		}
		if len(out) == n {
			return nil, fmt.Errorf("%w: %s has no files to read (--include %q)", ErrInput, in, include)
		}
	}
	return out, nil
}

// countingReader counts the bytes read from the file, compressed or not:
// that is what progress is measured in.
type countingReader struct {
	r    io.Reader
	read func(int64)
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read(int64(n))
	return n, err
}

// errSkip marks a file that is not text (binary data); it is listed in the
// manifest as skipped, not an error.
var errSkip = errors.New("not text")

// readDocs calls emit with every document of f in order.
func readDocs(f file, field string, read func(int64), emit func(text string) error) error {
	fm, comp := formatOf(f.path)
	if fm == formatParquet {
		if comp != "" {
			return fmt.Errorf("%w: %s: compress parquet inside the file, not around it", ErrInput, f.path)
		}
		return readParquet(f, field, read, emit)
	}
	h, err := os.Open(f.path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInput, err)
	}
	defer h.Close()
	r, err := decompress(countingReader{h, read}, comp)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInput, f.path, err)
	}
	defer r.Close()
	if fm == formatJSONL {
		return readJSONL(f.path, r, field, emit)
	}
	return readText(f.path, r, emit)
}

func decompress(r io.Reader, comp string) (io.ReadCloser, error) {
	switch comp {
	case ".gz":
		return gzip.NewReader(r)
	case ".zst", ".zstd":
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<30))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	}
	return io.NopCloser(r), nil
}

// readText reads a whole file as one document. A file with a NUL byte or
// mostly invalid UTF-8 is binary: skipped.
func readText(path string, r io.Reader, emit func(string) error) error {
	b, err := io.ReadAll(io.LimitReader(r, maxTextFile+1))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInput, path, err)
	}
	if len(b) > maxTextFile {
		return fmt.Errorf("%w: %s: more than %d bytes in one document", ErrInput, path, maxTextFile)
	}
	if bytes.IndexByte(b, 0) >= 0 || !mostlyUTF8(b) {
		return errSkip
	}
	if len(b) == 0 {
		return nil
	}
	return emit(string(b))
}

// mostlyUTF8 reports whether at most 1 % of a text's runes are invalid.
func mostlyUTF8(b []byte) bool {
	bad, n := 0, 0
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			bad++
		}
		n++
		b = b[size:]
	}
	return bad*100 <= n
}

// readJSONL reads one JSON object per line and emits its field (a string).
// Blank lines are skipped; anything else that is not such an object is an
// error naming the line.
func readJSONL(path string, r io.Reader, field string, emit func(string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), maxLine)
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			return fmt.Errorf("%w: %s:%d: %v", ErrInput, path, line, err)
		}
		raw, ok := obj[field]
		var text string
		if !ok || json.Unmarshal(raw, &text) != nil {
			return fmt.Errorf("%w: %s:%d: no string field %q (--text-field)", ErrInput, path, line, field)
		}
		if text == "" {
			continue
		}
		if err := emit(text); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInput, path, err)
	}
	return nil
}

// readParquet emits the string column field of every row, row groups and
// pages in file order; null and empty values are skipped.
func readParquet(f file, field string, read func(int64), emit func(string) error) error {
	h, err := os.Open(f.path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInput, err)
	}
	defer h.Close()
	pf, err := parquet.OpenFile(h, f.size)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInput, f.path, err)
	}
	leaf, ok := pf.Schema().Lookup(field)
	if !ok || leaf.MaxRepetitionLevel != 0 || leaf.Node.Type().Kind() != parquet.ByteArray {
		return fmt.Errorf("%w: %s: no string column %q (--text-field; columns %v)", ErrInput, f.path, field, pf.Schema().Columns())
	}
	for _, rg := range pf.RowGroups() {
		if err := readColumn(rg.ColumnChunks()[leaf.ColumnIndex], emit); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInput, f.path, err)
		}
	}
	read(f.size)
	return nil
}

func readColumn(cc parquet.ColumnChunk, emit func(string) error) error {
	pages := cc.Pages()
	defer pages.Close()
	var vals []parquet.Value
	for {
		p, err := pages.ReadPage()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		vals = append(vals[:0], make([]parquet.Value, p.NumValues())...)
		err = emitValues(p, vals, emit)
		parquet.Release(p)
		if err != nil {
			return err
		}
	}
}

func emitValues(p parquet.Page, vals []parquet.Value, emit func(string) error) error {
	n, err := p.Values().ReadValues(vals)
	if err != nil && err != io.EOF {
		return err
	}
	for _, v := range vals[:n] {
		if v.IsNull() || len(v.ByteArray()) == 0 {
			continue
		}
		if err := emit(string(v.ByteArray())); err != nil {
			return err
		}
	}
	return nil
}
