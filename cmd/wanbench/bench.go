package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/intellect-node/intellect-node/internal/wan"
)

// tcpOverhead is the IPv4 + TCP (with timestamps) header bytes per segment.
const tcpOverhead = 20 + 32

type benchFlags struct {
	rtt, rate, loss float64
	size            int64
	mtu, repeat     int
	raw, offload    bool
	verbose         bool
}

func cmdBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var f benchFlags
	fs.Float64Var(&f.rtt, "rtt", 100, "round-trip time of the link in ms (half each way)")
	fs.Float64Var(&f.rate, "rate", 1000, "link rate in Mbit/s")
	fs.Float64Var(&f.loss, "loss", 0, "random loss probability each way")
	fs.Int64Var(&f.size, "bytes", 1<<30, "bytes per transfer")
	fs.IntVar(&f.mtu, "mtu", 1500, "MTU of the link")
	fs.IntVar(&f.repeat, "n", 1, "transfers per case")
	fs.BoolVar(&f.offload, "offload", true, "TCP segmentation offload on the TUN devices")
	fs.BoolVar(&f.raw, "raw", true, "also measure a raw transfer with dd and python3 (when installed)")
	fs.BoolVar(&f.verbose, "v", false, "log progress to stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ideal := f.rate * 1e6 / 8 * float64(f.mtu-tcpOverhead) / float64(f.mtu)
	fmt.Printf("link: %g ms RTT, %g Mbit/s, loss %g, MTU %d, offload %v; ideal TCP goodput %.1f MiB/s\n",
		f.rtt, f.rate, f.loss, f.mtu, f.offload, ideal/(1<<20))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\tMiB/s avg\tMiB/s 2nd half\t2nd half / ideal\tqueue drops\t")
	cases := []struct {
		name    string
		profile wan.Profile
		raw     bool
	}{
		{"emulator, no delay, no limit (capacity)", wan.Pair(0, 0, 0), false},
		{"Go bulk TCP through the link", wan.Pair(f.rtt, f.rate, f.loss), f.raw},
	}
	for _, c := range cases {
		if err := benchCase(ctx, tw, f, c.name, c.profile, c.raw, ideal); err != nil {
			return err
		}
	}
	return tw.Flush()
}

func benchCase(ctx context.Context, tw *tabwriter.Writer, f benchFlags, name string, p wan.Profile, raw bool, ideal float64) error {
	n, err := wan.Start(ctx, p, wan.Options{MTU: f.mtu, NoOffload: !f.offload, Log: (&netFlags{verbose: f.verbose}).logger()})
	if err != nil {
		return err
	}
	defer n.Close()
	for range f.repeat {
		tr, err := n.Bulk(ctx, 0, 1, f.size)
		if err != nil {
			return err
		}
		row(tw, n, name, tr.Rate(), tr.SteadyRate(), ideal)
	}
	if !raw {
		return nil
	}
	if _, err := exec.LookPath("python3"); err != nil {
		fmt.Fprintln(tw, "raw dd → python3\t(python3 missing)\t\t\t\t")
		return nil
	}
	for range f.repeat {
		rate, err := rawTransfer(ctx, n, f.size)
		if err != nil {
			return err
		}
		row(tw, n, "raw dd → python3 through the link", rate, 0, ideal)
	}
	return nil
}

func row(tw *tabwriter.Writer, n *wan.Net, name string, avg, steady, ideal float64) {
	var drops uint64
	for _, l := range n.Forwarder().Stats().Links {
		drops += l.QueueDrops
	}
	st := "-"
	if steady > 0 {
		st = fmt.Sprintf("%.1f", steady/(1<<20))
	}
	ratio := steady
	if ratio == 0 {
		ratio = avg
	}
	fmt.Fprintf(tw, "%s\t%.1f\t%s\t%.3f\t%d\t\n", name, avg/(1<<20), st, ratio/ideal, drops)
}

// sinkScript listens on 10.77.0.2:5201, says "ready", and reports the bytes
// received and the seconds from accept to end of stream.
const sinkScript = `import socket,sys,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)
s.bind((sys.argv[1],5201)); s.listen(1); print("ready",flush=True)
c,_=s.accept(); t=time.monotonic(); b=bytearray(1<<20); m=memoryview(b); n=0
while True:
    k=c.recv_into(m)
    if k==0: break
    n+=k
print(n,time.monotonic()-t,flush=True)
`

// rawTransfer sends size bytes with dd over bash's /dev/tcp from host 0 to a
// python3 sink on host 1, both plain processes in their namespaces, and
// returns the rate the sink saw in bytes per second.
func rawTransfer(ctx context.Context, n *wan.Net, size int64) (float64, error) {
	sinkCmd := n.Command(1, "python3", "-c", sinkScript, "{addr}")
	out, err := sinkCmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	sink, err := n.StartCommand(1, sinkCmd)
	if err != nil {
		return 0, err
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "ready" {
		return 0, fmt.Errorf("raw sink did not start: %v", sink.Wait())
	}
	mib := size >> 20
	src := n.Command(0, "bash", "-c", fmt.Sprintf("dd if=/dev/zero bs=1M count=%d status=none > /dev/tcp/{addr1}/5201", mib))
	start := time.Now()
	srcProc, err := n.StartCommand(0, src)
	if err != nil {
		return 0, err
	}
	if err := srcProc.Wait(); err != nil {
		return 0, fmt.Errorf("raw source: %w", err)
	}
	if !lines.Scan() {
		return 0, fmt.Errorf("raw sink: no result after %v: %v", time.Since(start), sink.Wait())
	}
	fields := strings.Fields(lines.Text())
	got, _ := strconv.ParseInt(fields[0], 10, 64)
	secs, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
	sink.Wait()
	if got != mib<<20 || secs <= 0 {
		return 0, fmt.Errorf("raw sink got %q, want %d bytes", lines.Text(), mib<<20)
	}
	return float64(got) / secs, nil
}
