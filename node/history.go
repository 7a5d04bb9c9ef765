package node

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

// HistoryFile is the file under the node's home where every completed outer
// step (and the initial model, step 0) is appended as one JSON OuterRecord
// per line, so a run can be analysed after the process exits. The schema is
// OuterRecord; ReadHistory and DecodeHistory are its only readers, for the
// node and for the tools under cmd/ alike.
const HistoryFile = "history.jsonl"

// Limits of a history file. It is written by our own node but read as
// untrusted input all the same: a record is about 300 bytes.
const (
	// MaxHistoryLine bounds one line (one OuterRecord) in bytes, newline
	// excluded.
	MaxHistoryLine = 64 << 10
	// MaxHistoryRecords bounds the records of one file (an outer step a
	// second for twelve days).
	MaxHistoryRecords = 1 << 20
)

// ErrBadHistory is wrapped by every error of DecodeHistory about the
// content of a history file; the message names the line.
var ErrBadHistory = errors.New("node: bad history")

// appendHistory appends rec to <home>/HistoryFile. A record a crash cut
// short (the file does not end in a newline) is dropped first, so the file
// stays one whole record per line.
func (n *Node) appendHistory(rec OuterRecord) error {
	b, _ := json.Marshal(rec)
	return appendRecordLine(filepath.Join(n.cfg.Home, HistoryFile), append(b, '\n'))
}

// keepHistory appends rec to the history file, logging a failure: the
// history is the operator's record, never a reason to stop training.
func (n *Node) keepHistory(rec OuterRecord) {
	if err := n.appendHistory(rec); err != nil {
		n.log.Warn("history", "err", err)
	}
}

// appendRecordLine appends line to the file at path, first cutting the file
// back to its last newline when it does not end in one.
func appendRecordLine(path string, line []byte) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	end, err := wholeLinesEnd(f)
	if err != nil {
		return err
	}
	if err := f.Truncate(end); err != nil {
		return err
	}
	_, err = f.WriteAt(line, end)
	return err
}

// wholeLinesEnd returns the offset just after the file's last newline (0 if
// it has none within the last MaxHistoryLine+1 bytes).
func wholeLinesEnd(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	from := max(size-MaxHistoryLine-1, 0)
	tail := make([]byte, size-from)
	if _, err := f.ReadAt(tail, from); err != nil && err != io.EOF {
		return 0, err
	}
	if i := bytes.LastIndexByte(tail, '\n'); i >= 0 {
		return from + int64(i) + 1, nil
	}
	return 0, nil
}

// ReadHistory reads the records a node wrote to <home>/HistoryFile, in
// order, as DecodeHistory does. A missing file is an error that wraps
// fs.ErrNotExist.
func ReadHistory(home string) ([]OuterRecord, error) {
	f, err := os.Open(filepath.Join(home, HistoryFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := DecodeHistory(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return recs, nil
}

// DecodeHistory decodes a history stream: one JSON OuterRecord per line,
// blank lines skipped, unknown fields ignored. A last line without its
// newline that does not decode is what a crash in the middle of a write
// leaves, and is skipped; any other line that does not decode, a line over
// MaxHistoryLine bytes, more than MaxHistoryRecords records, or a record with
// impossible values (negative times, counts or byte counts) is an error
// wrapping ErrBadHistory that names the line (from 1).
func DecodeHistory(r io.Reader) ([]OuterRecord, error) {
	br := bufio.NewReaderSize(r, MaxHistoryLine+1)
	var out []OuterRecord
	for line := 1; ; line++ {
		b, err := br.ReadSlice('\n')
		last := err == io.EOF
		switch {
		case err == bufio.ErrBufferFull:
			return nil, fmt.Errorf("%w: line %d: over %d bytes", ErrBadHistory, line, MaxHistoryLine)
		case err != nil && !last:
			return nil, fmt.Errorf("node: history line %d: %w", line, err)
		}
		if b = bytes.TrimSpace(b); len(b) > 0 {
			if len(out) == MaxHistoryRecords {
				return nil, fmt.Errorf("%w: more than %d records", ErrBadHistory, MaxHistoryRecords)
			}
			rec, err := decodeRecord(b)
			if err != nil && !(last && truncated(b)) {
				return nil, fmt.Errorf("%w: line %d: %v", ErrBadHistory, line, err)
			}
			if err == nil {
				out = append(out, rec)
			}
		}
		if last {
			return out, nil
		}
	}
}

// truncated reports whether b is a proper prefix of a JSON value, as a
// write cut short leaves it.
func truncated(b []byte) bool {
	var v any
	return json.NewDecoder(bytes.NewReader(b)).Decode(&v) == io.ErrUnexpectedEOF
}

// decodeRecord decodes and checks one line of a history file.
func decodeRecord(b []byte) (OuterRecord, error) {
	var r OuterRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return r, err
	}
	return r, r.check()
}

// check rejects values no node writes.
func (r OuterRecord) check() error {
	for _, v := range []float64{r.AllReduceSec, r.ComputeSec, r.WallSec, r.Utilization} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("step %d: time %v out of range", r.Step, v)
		}
	}
	if r.BytesSent < 0 || r.BytesReceived < 0 || r.Members < 0 || r.Attempts < 0 {
		return fmt.Errorf("step %d: negative count", r.Step)
	}
	return nil
}
