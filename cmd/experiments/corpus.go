package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/intellect-node/intellect-node/train"
)

// The real-text corpus of the experiments: the Go standard library's
// source (every machine with Go has it), byte-tokenized into one shard.
// Files are taken in sorted path order, so the shard — and its held-out
// tail — is the same on every machine with the same Go release.

// goSrcShardBytes bounds the shard: 16 MiB is ≈ 16 k tiny-preset inner
// steps of fresh windows per node, far more than any run here draws.
const goSrcShardBytes = 16 << 20

// goSourceShard writes (once) a byte shard of GOROOT/src's non-test .go
// files under dir and returns its path.
func goSourceShard(dir string) (string, error) {
	path := filepath.Join(dir, "gosrc-"+runtime.Version()+train.ShardExt)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	root := filepath.Join(runtime.GOROOT(), "src")
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") && !strings.Contains(p, "testdata") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("go source corpus: %w", err)
	}
	sort.Strings(files)
	var toks []uint32
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("go source corpus: %w", err)
		}
		for _, c := range b {
			toks = append(toks, uint32(c))
		}
		if len(toks) >= goSrcShardBytes {
			toks = toks[:goSrcShardBytes]
			break
		}
	}
	if len(toks) < 1<<20 {
		return "", fmt.Errorf("go source corpus: only %d bytes of .go files under %s", len(toks), root)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return path, train.WriteShard(path, toks, 256)
}
