package node

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// PastInitialFile, under the node's home, says that this node held a model
// past the run's initial one (outer step 0): it is written once, when the
// node first completes or fetches a later model, and names that model. A
// node restarted without a checkpoint (killed before its first) then does
// not train the initial model again with peers that hold only it — a line
// of their own that members left alone would adopt — but waits for a peer
// past step 0 (mesh.Config.PastInitial). Delete the file to start the run
// again from its initial model.
const PastInitialFile = "past-initial"

// pastInitial is the content of PastInitialFile: the first model past step
// 0 this node held (the operator's record; only the file's presence counts).
type pastInitial struct {
	Step uint64 `json:"step"`
	Hash string `json:"hash"`
}

// hasPastInitial reports whether home holds PastInitialFile.
func hasPastInitial(home string) (bool, error) {
	_, err := os.Stat(filepath.Join(home, PastInitialFile))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// notePastInitial writes PastInitialFile the first time this node holds a
// model past step 0 (training goroutine). A failure is logged: the file
// guards against a rare fork after a restart, never a reason to stop.
func (n *Node) notePastInitial(step uint64, hash string) {
	if step == 0 || n.pastInitial {
		return
	}
	b, _ := json.Marshal(pastInitial{Step: step, Hash: hash})
	path := filepath.Join(n.cfg.Home, PastInitialFile)
	if err := writeFileAtomic(path, append(b, '\n')); err != nil {
		n.log.Warn("could not record that this node is past the initial model", "file", path, "err", err)
		return
	}
	n.pastInitial = true
}
