package emu

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// OpenTUN opens (creating if needed) the TUN device dev inside the network
// namespace whose file is at netns ("" = the caller's own) and returns it as
// a non-blocking file served by the Go poller, so Close interrupts a Read.
// The device carries raw IP packets (IFF_TUN|IFF_NO_PI). With offload, each
// packet is preceded by a virtio_net_hdr (VnetHdrLen bytes) and the kernel
// may hand over TCP super-packets of up to 64 KiB with checksums left to do
// (TSO4, CSUM), which cuts the per-packet cost of forwarding many times; the
// far end's device, opened the same way, takes them back as they are. A
// device created here disappears when the file is closed; one made
// persistent beforehand (ip tuntap add) stays.
func OpenTUN(netns, dev string, offload bool) (*os.File, error) {
	var f *os.File
	err := InNetns(netns, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("emu: open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(dev)
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("emu: tun %q: %w", dev, err)
		}
		flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if offload {
			flags |= unix.IFF_VNET_HDR
		}
		ifr.SetUint16(flags)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("emu: TUNSETIFF %q: %w", dev, err)
		}
		if offload {
			if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, unix.TUN_F_CSUM|unix.TUN_F_TSO4); err != nil {
				unix.Close(fd)
				return fmt.Errorf("emu: TUNSETOFFLOAD %q: %w", dev, err)
			}
		}
		f = os.NewFile(uintptr(fd), "tun:"+dev)
		return nil
	})
	return f, err
}

// InNetns runs fn on a fresh OS thread that has entered the network
// namespace whose file is at netns ("" runs fn where the caller is), and
// waits for it. Sockets and TUN devices created by fn belong to that
// namespace and stay usable from any goroutine afterwards. fn must not start
// goroutines that expect to be in the namespace: only its own thread is.
func InNetns(netns string, fn func() error) error {
	if netns == "" {
		return fn()
	}
	target, err := os.Open(netns)
	if err != nil {
		return fmt.Errorf("emu: netns: %w", err)
	}
	defer target.Close()
	done := make(chan error, 1)
	go func() { done <- onThreadIn(int(target.Fd()), netns, fn) }()
	return <-done
}

// onThreadIn locks the goroutine to its thread, enters the namespace, runs
// fn and goes back. If going back fails the thread stays locked, so the
// runtime ends it with this goroutine instead of reusing a thread that is
// stuck in the wrong namespace.
func onThreadIn(target int, name string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("emu: own netns: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("emu: setns %s: %w", name, err)
	}
	fnErr := fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("emu: setns back from %s: %w", name, err)
	}
	runtime.UnlockOSThread()
	return fnErr
}
