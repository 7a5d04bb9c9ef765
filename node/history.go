package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// HistoryFile is the file under the node's home where every completed outer
// step (and the initial model, step 0) is appended as one JSON OuterRecord
// per line, so a run can be analysed after the process exits.
const HistoryFile = "history.jsonl"

// appendHistory appends rec to <home>/HistoryFile.
func (n *Node) appendHistory(rec OuterRecord) {
	b, _ := json.Marshal(rec)
	f, err := os.OpenFile(filepath.Join(n.cfg.Home, HistoryFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		n.log.Warn("history", "err", err)
		return
	}
	defer f.Close()
	f.Write(append(b, '\n'))
}

// ReadHistory reads the records a node wrote to <home>/HistoryFile, in order.
func ReadHistory(home string) ([]OuterRecord, error) {
	path := filepath.Join(home, HistoryFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var recs []OuterRecord
	for i, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var r OuterRecord
		if err := json.Unmarshal(l, &r); err != nil {
			return nil, fmt.Errorf("node: %s line %d: %w", path, i+1, err)
		}
		recs = append(recs, r)
	}
	return recs, nil
}
