package main

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/intellect-node/intellect-node/node"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressBars draws node.Progress reports (model fetches, checkpoint
// writes) as progress bars on stderr when it is a terminal (bytes, rate,
// time left). Elsewhere it returns nil: the
// node's own log lines (one a second) tell the same.
func progressBars() func(node.Progress) {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil
	}
	var mu sync.Mutex
	var bar *progressbar.ProgressBar
	var total int64
	var work string
	finished := false // the bar of (work, total) reached its end
	return func(p node.Progress) {
		mu.Lock()
		defer mu.Unlock()
		if finished && p.Work == work && p.Total == total && p.Done >= p.Total {
			return // a late report of work already shown complete
		}
		if bar == nil || p.Total != total || p.Work != work {
			finished = false
			total, work = p.Total, p.Work
			bar = progressbar.NewOptions64(p.Total, progressbar.OptionSetWriter(os.Stderr),
				progressbar.OptionSetDescription(fmt.Sprintf("%s %s", p.Work, p.Detail)), progressbar.OptionShowBytes(true),
				progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionShowCount(),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }))
		}
		bar.Set64(p.Done)
		if p.Done >= p.Total {
			bar, finished = nil, true
		}
	}
}
