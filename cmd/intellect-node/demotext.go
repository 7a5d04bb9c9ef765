package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/intellect-node/intellect-node/node"
	"github.com/intellect-node/intellect-node/train/corpus"
	"github.com/intellect-node/intellect-node/train/tokenizer"
)

func init() {
	register("demo-text", "tokenize a real corpus, train 3 local nodes on it, print held-out bits per byte and a sample", runDemoText)
}

type demoTextFlags struct {
	corpus, include, tokenizer, dir, preset, prompt string
	nodes, outer, inner, port                       int
	baseline                                        bool
}

func runDemoText(args []string) error {
	var f demoTextFlags
	fs := newFlagSet("demo-text", "[--corpus DIR] [--outer-steps N] [--baseline] [flags]")
	fs.StringVar(&f.corpus, "corpus", "", "text tree to learn from (default: the Go installation's source tree, which every machine with Go has)")
	fs.StringVar(&f.include, "include", "*.go", "base-name `glob` of the corpus files read")
	fs.StringVar(&f.tokenizer, "tokenizer", "byte", "byte, or a Hugging Face tokenizer.json")
	fs.StringVar(&f.dir, "dir", "", "directory for the shards, homes and logs (default: a new temporary one)")
	fs.StringVar(&f.preset, "preset", "tiny", "model preset")
	fs.StringVar(&f.prompt, "prompt", "func (s *Server) ", "prompt of the sample printed at the end")
	fs.IntVar(&f.nodes, "nodes", 3, "nodes training together")
	fs.IntVar(&f.outer, "outer-steps", 20, "outer steps")
	fs.IntVar(&f.inner, "inner-steps", node.CodecPoint(node.DefaultCodec).InnerSteps, "inner steps per outer step (H)")
	fs.IntVar(&f.port, "port", 8660, "status API port of the first node; the others use the next ones")
	fs.BoolVar(&f.baseline, "baseline", false, "then train 1 node with nodes× the batch for the same steps (equal tokens) and compare")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if f.nodes < 1 || f.outer < 1 || f.inner < 1 {
		return fmt.Errorf("want --nodes, --outer-steps and --inner-steps ≥ 1")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := f.defaults(); err != nil {
		return err
	}
	data := filepath.Join(f.dir, "data")
	m, err := f.tokenize(ctx, data)
	if err != nil {
		return err
	}
	perByte := float64(m.Held.Tokens) / float64(max(m.Held.Bytes, 1)) / math.Ln2 // nats/token → bits/byte
	bpb, err := f.train(ctx, data, perByte)
	if err != nil {
		return err
	}
	if f.baseline {
		if err := f.trainBaseline(ctx, data, perByte, bpb); err != nil {
			return err
		}
	}
	fmt.Printf("\na sample from node1's model (generate --checkpoint %s --prompt %q):\n", filepath.Join(f.dir, "node1"), f.prompt)
	return generate([]string{"--checkpoint", filepath.Join(f.dir, "node1"), "--tokenizer", f.tokenizer,
		"--prompt", f.prompt, "--max-tokens", "300", "--seed", "1", "--temperature", "0.7"}, os.Stdout, os.Stderr)
}

func (f *demoTextFlags) defaults() error {
	if f.corpus == "" {
		f.corpus = filepath.Join(goRoot(), "src")
	}
	if _, err := os.Stat(f.corpus); err != nil {
		return fmt.Errorf("corpus: %w (pass --corpus DIR)", err)
	}
	if f.dir == "" {
		d, err := os.MkdirTemp("", "intellect-demo-text-")
		if err != nil {
			return err
		}
		f.dir = d
	}
	return os.MkdirAll(f.dir, 0o755)
}

// goRoot finds the Go installation: this binary's, `go env GOROOT`, or /usr/local/go.
func goRoot() string {
	if r := runtime.GOROOT(); r != "" {
		return r
	}
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
		return string(bytes.TrimSpace(out))
	}
	return "/usr/local/go"
}

func (f *demoTextFlags) tokenize(ctx context.Context, out string) (*corpus.Manifest, error) {
	tok, err := tokenizer.Load(f.tokenizer)
	if err != nil {
		return nil, err
	}
	o := corpus.Options{Tokenizer: tok, HeldOut: 0.02, Include: f.include, Progress: tokenizeProgress()}
	if f.tokenizer != "byte" {
		o.TokenizerFile = f.tokenizer
	}
	fmt.Printf("intellect-node demo-text: tokenizing %s (%s) into %s\n", f.corpus, f.include, out)
	m, err := corpus.Tokenize(ctx, o, out, []string{f.corpus})
	if err != nil {
		return nil, err
	}
	fmt.Printf("  %d documents, %d training tokens, %d held-out tokens (%d documents) in %.1f s\n",
		m.Train.Documents+m.Held.Documents, m.Train.Tokens, m.Held.Tokens, m.Held.Documents, m.Seconds)
	return m, nil
}

// train runs the nodes until they stop at --outer-steps, printing each outer
// step's held-out bits per byte, and returns the last.
func (f *demoTextFlags) train(ctx context.Context, data string, perByte float64) (float64, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	d := &demo{self: self, dir: f.dir, port: f.port, args: []string{"--run", "demo-text", "--preset", f.preset,
		"--inner-steps", fmt.Sprint(f.inner), "--max-outer-steps", fmt.Sprint(f.outer), "--data", data,
		"--min-members", fmt.Sprint(f.nodes)}}
	defer d.stopAll()
	fmt.Printf("%d nodes on 127.0.0.1 train one %s model, %d outer × %d inner steps (logs in %s)\n", f.nodes, f.preset, f.outer, f.inner, f.dir)
	first, err := d.start()
	if err != nil {
		return 0, err
	}
	var s node.Status
	if err := d.waitStatus(ctx, first, func(s node.Status) bool { return len(s.Addrs) > 0 }, &s); err != nil {
		return 0, err
	}
	d.boot = s.Addrs[0]
	for i := 1; i < f.nodes; i++ {
		if _, err := d.start(); err != nil {
			return 0, err
		}
	}
	return f.watch(ctx, d, perByte)
}

func (f *demoTextFlags) watch(ctx context.Context, d *demo, perByte float64) (float64, error) {
	last, start := -1.0, time.Now()
	printed := uint64(0)
	for {
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(time.Second):
		}
		st, alive := d.poll()
		if alive == 0 {
			break
		}
		if s := st[0]; s != nil && s.OuterStep > printed && s.EvalLoss > 0 {
			printed, last = s.OuterStep, s.EvalLoss*perByte
			fmt.Printf("outer %3d  held-out %.3f bits/byte  (loss %.3f nats/token)  %d members  %4.0f s\n",
				s.OuterStep, last, s.EvalLoss, len(s.Members), time.Since(start).Seconds())
		}
	}
	recs, err := node.ReadHistory(d.nodes[0].home)
	if err != nil || len(recs) == 0 {
		return last, fmt.Errorf("node1 left no history (see %s): %v", d.dir, err)
	}
	r := recs[len(recs)-1]
	first := recs[0].EvalLoss * perByte
	last = r.EvalLoss * perByte
	fmt.Printf("held-out bits per byte: %.3f at step %d → %.3f at step %d (%d nodes, %.0f s)\n",
		first, recs[0].Step, last, r.Step, f.nodes, time.Since(start).Seconds())
	return last, nil
}

// trainBaseline trains one node with nodes× the batch for the same inner
// steps (the same tokens as the whole network) and prints both results.
func (f *demoTextFlags) trainBaseline(ctx context.Context, data string, perByte, network float64) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	steps := f.outer * f.inner
	fmt.Printf("baseline: 1 node, %d× batch, %d steps (train --grad-accum %d)\n", f.nodes, steps, f.nodes)
	cmd := exec.CommandContext(ctx, self, "train", "--preset", f.preset, "--data", data, "--home", filepath.Join(f.dir, "baseline"),
		"--grad-accum", fmt.Sprint(f.nodes), "--steps", fmt.Sprint(steps), "--seed", fmt.Sprint(node.RunSeed("demo-text")),
		"--eval-every", fmt.Sprint(steps), "--json", "--save-every", fmt.Sprint(steps),
		"--lr-decay", fmt.Sprint(node.CodecPoint(node.DefaultCodec).LRDecay)) // the network's schedule (0: the preset's)
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("baseline train: %w", err)
	}
	eval := -1.0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var p struct {
			EvalLoss *float64 `json:"eval_loss"`
		}
		if json.Unmarshal(sc.Bytes(), &p) == nil && p.EvalLoss != nil {
			eval = *p.EvalLoss
		}
	}
	if eval < 0 {
		return fmt.Errorf("baseline train printed no held-out loss: %s", strings.TrimSpace(string(out)))
	}
	b := eval * perByte
	fmt.Printf("held-out bits per byte at equal tokens: %d nodes (DiLoCo) %.3f, 1 node with %d× batch %.3f (DiLoCo %+.1f %%)\n",
		f.nodes, network, f.nodes, b, 100*(network/b-1))
	return nil
}
