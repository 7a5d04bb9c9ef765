// Package emu is a userspace WAN link emulator: it forwards IPv4 packets
// between TUN devices, one per host (each usually in its own network
// namespace), and gives every ordered pair of hosts its own link with a
// one-way delay, a rate limit enforced by a token bucket in front of a
// drop-tail queue, and optional seeded random loss.
//
// The kernel on the machines this project is developed on has no netem, so
// delay cannot come from tc; this package is the replacement. The link model
// (Bucket, DelayQueue, Loss) is pure and clock-free: callers pass the time in
// nanoseconds. Forwarder wires it to TUN devices and owns the goroutines: one
// reader per host and one delivery goroutine per link.
package emu
