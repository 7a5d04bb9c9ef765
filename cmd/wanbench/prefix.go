package main

import (
	"bytes"
	"io"
	"sync"
)

// prefixWriter writes each complete line with "name| " in front, so that the
// output of several hosts stays readable. Lines of different writers sharing
// one destination do not interleave.
type prefixWriter struct {
	dst    io.Writer
	prefix []byte
	buf    []byte
}

var writeMu sync.Mutex

func newPrefixWriter(dst io.Writer, name string) *prefixWriter {
	return &prefixWriter{dst: dst, prefix: []byte(name + "| ")}
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		writeMu.Lock()
		_, err := w.dst.Write(append(append([]byte{}, w.prefix...), w.buf[:i+1]...))
		writeMu.Unlock()
		w.buf = w.buf[i+1:]
		if err != nil {
			return len(p), err
		}
	}
}
