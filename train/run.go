package train

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"time"
)

// RunConfig drives Run: a standalone training run of one worker with progress
// output, periodic evaluation and checkpoints.
type RunConfig struct {
	Options   Options
	Steps     int       // run until this many optimizer steps are done (≥ 1)
	Home      string    // checkpoints go to Home/checkpoints/step-NNNNNNNN; "" disables them
	Resume    bool      // continue from the newest checkpoint under Home, if any
	JSON      bool      // one JSON object per progress line instead of text
	LogEvery  int       // progress line every LogEvery steps; default 10
	EvalEvery int       // held-out loss every EvalEvery steps (and at 0 and the end); default 100
	SaveEvery int       // checkpoint every SaveEvery steps (and at the end); default 200
	Keep      int       // step directories kept; default 3
	Out       io.Writer // progress output
}

// Progress is one line of Run's output (with RunConfig.JSON, as a JSON object).
type Progress struct {
	Step         int      `json:"step"`
	Loss         *float64 `json:"loss"` // null on the step-0 line (no training step yet)
	EvalLoss     *float64 `json:"eval_loss,omitempty"`
	EvalAcc      *float64 `json:"eval_answer_acc,omitempty"` // greedy accuracy on held-out answer tokens (default corpus)
	TokensPerSec float64  `json:"tokens_per_sec"`
	LR           float64  `json:"lr"`
	GradNorm     float64  `json:"grad_norm"`
	ElapsedSec   float64  `json:"elapsed_s"`
	ETASec       float64  `json:"eta_s"`
	Checkpoint   string   `json:"checkpoint,omitempty"`
}

func (rc *RunConfig) defaults() {
	if rc.LogEvery <= 0 {
		rc.LogEvery = 10
	}
	if rc.EvalEvery <= 0 {
		rc.EvalEvery = 100
	}
	if rc.SaveEvery <= 0 {
		rc.SaveEvery = 200
	}
	if rc.Keep <= 0 {
		rc.Keep = 3
	}
}

// Run trains until rc.Steps steps are done or ctx is cancelled; either way it
// writes a final checkpoint (when Home is set). Cancellation is not an error.
func Run(ctx context.Context, rc RunConfig, data Source) error {
	rc.defaults()
	if rc.Steps < 1 {
		return fmt.Errorf("%w: steps = %d", ErrConfig, rc.Steps)
	}
	t, err := startTrainer(rc, data)
	if err != nil {
		return err
	}
	r := runner{rc: rc, t: t, start: time.Now(), first: t.StepCount()}
	if t.StepCount() == 0 {
		if err := r.eval(); err != nil {
			return err
		}
	}
	for t.StepCount() < rc.Steps && ctx.Err() == nil {
		if err := r.step(); err != nil {
			return err
		}
	}
	return r.finish()
}

func startTrainer(rc RunConfig, data Source) (*Trainer, error) {
	if rc.Resume && rc.Home != "" {
		dir, err := LatestCheckpoint(filepath.Join(rc.Home, "checkpoints"))
		if err != nil {
			return nil, err
		}
		if dir != "" {
			t, err := ResumeTrainer(dir, data)
			if err == nil {
				fmt.Fprintf(rc.Out, "# resumed from %s at step %d\n", dir, t.StepCount())
			}
			return t, err
		}
		fmt.Fprintf(rc.Out, "# no checkpoint under %s: starting fresh\n", rc.Home)
	}
	return NewTrainer(rc.Options, data)
}

type runner struct {
	rc     RunConfig
	t      *Trainer
	start  time.Time
	first  int // step at start (resume)
	tokens int // since the last line
	since  time.Time
	last   StepStats
}

func (r *runner) step() error {
	if r.since.IsZero() {
		r.since = time.Now()
	}
	st, err := r.t.Step()
	if err != nil {
		return err
	}
	r.last, r.tokens = st, r.tokens+st.Tokens
	n := st.Step
	p := r.progress()
	if n%r.rc.EvalEvery == 0 || n == r.rc.Steps {
		if err := r.evalInto(&p); err != nil {
			return err
		}
	}
	if n%r.rc.SaveEvery == 0 && n != r.rc.Steps {
		if p.Checkpoint, err = r.save(); err != nil {
			return err
		}
	}
	if n%r.rc.LogEvery == 0 || p.EvalLoss != nil || p.Checkpoint != "" || n == r.rc.Steps {
		r.print(p)
		r.tokens, r.since = 0, time.Now()
	}
	return nil
}

func (r *runner) progress() Progress {
	st := r.last
	el := time.Since(r.start).Seconds()
	done := st.Step - r.first
	loss := st.Loss
	p := Progress{Step: st.Step, Loss: &loss, LR: st.LR, GradNorm: st.GradNorm, ElapsedSec: el}
	if dt := time.Since(r.since).Seconds(); dt > 0 {
		p.TokensPerSec = float64(r.tokens) / dt
	}
	if done > 0 {
		p.ETASec = el / float64(done) * float64(r.rc.Steps-st.Step)
	}
	return p
}

func (r *runner) eval() error {
	p := Progress{Step: 0}
	if err := r.evalInto(&p); err != nil {
		return err
	}
	r.print(p)
	return nil
}

func (r *runner) evalInto(p *Progress) error {
	ev, err := r.t.EvalDetail()
	if err != nil {
		return err
	}
	p.EvalLoss = &ev.Loss
	if !math.IsNaN(ev.AnswerAcc) {
		p.EvalAcc = &ev.AnswerAcc
	}
	return nil
}

func (r *runner) save() (string, error) {
	if r.rc.Home == "" {
		return "", nil
	}
	return r.t.SaveCheckpoint(filepath.Join(r.rc.Home, "checkpoints"), r.rc.Keep)
}

func (r *runner) finish() error {
	dir, err := r.save()
	if err != nil {
		return err
	}
	if dir != "" {
		fmt.Fprintf(r.rc.Out, "# checkpoint %s\n", dir)
	}
	return nil
}

func (r *runner) print(p Progress) {
	if r.rc.JSON {
		b, _ := json.Marshal(p)
		fmt.Fprintf(r.rc.Out, "%s\n", b)
		return
	}
	line := fmt.Sprintf("step %6d/%d", p.Step, r.rc.Steps)
	if p.Loss != nil {
		line += fmt.Sprintf("  loss %.4f  lr %.2e  |g| %.3f  %8.0f tok/s", *p.Loss, p.LR, p.GradNorm, p.TokensPerSec)
	}
	if p.EvalLoss != nil {
		line += fmt.Sprintf("  eval %.4f", *p.EvalLoss)
	}
	if p.EvalAcc != nil {
		line += fmt.Sprintf("  answer-acc %.1f%%", 100**p.EvalAcc)
	}
	line += fmt.Sprintf("  elapsed %s  eta %s", fmtDur(p.ElapsedSec), fmtDur(p.ETASec))
	if p.Checkpoint != "" {
		line += "  saved " + p.Checkpoint
	}
	fmt.Fprintln(r.rc.Out, line)
}

func fmtDur(s float64) string {
	return (time.Duration(s) * time.Second).Round(time.Second).String()
}
