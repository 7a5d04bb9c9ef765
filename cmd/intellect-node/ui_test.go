package main

// The web page in a real browser (make test-ui): headless Chromium against
// real node processes. Skipped when no chromium is installed, unless
// INTELLECT_UI=1 (make test-ui) makes its absence a failure.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/intellect-node/intellect-node/node"
)

// browser is a headless Chromium with its console collected.
type browser struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	errors []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("INTELLECT_UI") == "1" {
			t.Fatal("INTELLECT_UI=1 but no chromium on PATH (make test-ui installs it)")
		}
		t.Skip("no chromium on PATH: make test-ui installs it and runs this test")
	}
	// The flags keep Chromium off the network: this machine has none, and
	// background services would try it at every start.
	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.WindowSize(1280, 1000)}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browser{ctx: ctx, cancel: func() { cancel(); acancel() }}
	t.Cleanup(b.cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.errors = append(b.errors, fmt.Sprintf("%s:%d %s", m.URL, m.Line+1, m))
				b.mu.Unlock()
			}
		}
	}()
	return b
}

func (b *browser) consoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// waitPage polls the page until cond (a JavaScript expression) is true.
func (b *browser) waitPage(t *testing.T, what, cond string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](cond))
		if err == nil && ok {
			return
		}
		select {
		case <-ctx.Done():
			text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string]("document.body.innerText"))
			t.Fatalf("page: %s not seen in %v (last error %v); page text:\n%s", what, timeout, err, text)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// plotsHavePoints is true once every plot of the page has drawn ≥ n points.
func plotsHavePoints(n int) string {
	return fmt.Sprintf(`(() => { const p = window.__plotPoints || {}; const ids = ["loss","members","sync","util","bytes"];
		return ids.every(id => (p[id] || 0) >= %d); })()`, n)
}

func TestPageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser and node processes")
	}
	b := newBrowser(t)
	// Without worker momentum: the lone node's momentum against the
	// joiners' fresh zero gets it flagged, at times excluded (docs/robust.md
	// "Limits"), and this test is about the page.
	args := append(append([]string{}, e2eArgs...), "--inner-steps", "3", "--max-outer-steps", "1000", "--worker-momentum", "0")
	a := startNode(t, "a", "", args...)
	url := "http://" + a.api() + "/"

	// A lone node: no console error, "no peers yet", plots after 2 steps.
	if err := chromedp.Do(b.ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	b.waitPage(t, "plots of a lone node", plotsHavePoints(2), 60*time.Second)
	b.waitPage(t, "an empty peers table", `document.getElementById("peers").innerText.includes("no peers yet")`, 10*time.Second)
	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Fatalf("console errors with a lone node:\n%s", strings.Join(errs, "\n"))
	}

	// Two more members: the peers table lists both, the plots keep drawing.
	boot := bootstrapAddr(t, a)
	var others []string
	for _, name := range []string{"b", "c"} {
		p := startNode(t, name, "", append(args, "--bootstrap", boot)...)
		var st node.Status
		waitFor(t, 30*time.Second, name+"'s status", func() bool {
			var err error
			st, err = p.status()
			return err == nil && st.PeerID != ""
		}, p)
		others = append(others, st.PeerID)
	}
	for _, id := range others {
		b.waitPage(t, "peer "+id+" in the table", fmt.Sprintf(`[...document.querySelectorAll("#peers td[title]")].some(td => td.title === %q)`, id), 60*time.Second)
	}
	b.waitPage(t, "a ring of 3", `document.getElementById("cards").innerText.toLowerCase().includes("members\n3")`, 90*time.Second)
	b.waitPage(t, "plots of the network", plotsHavePoints(3), 30*time.Second)
	b.waitPage(t, "what the owners did with this node's update", `/my update\nclip [0-9.]+ · factor [0-9.]+/.test(document.getElementById("cards").innerText.toLowerCase())`, 30*time.Second)
	b.waitPage(t, "the ring of 3 with this node's links", `document.getElementById("ring").innerText.includes("(this node)") && (document.getElementById("ring").innerText.match(/ ms/g) || []).length >= 2`, 30*time.Second)
	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Fatalf("console errors with 3 nodes:\n%s", strings.Join(errs, "\n"))
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	out := os.Getenv("INTELLECT_UI_SCREENSHOT")
	if out == "" {
		out = t.TempDir() + "/page.png"
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(png))
}
