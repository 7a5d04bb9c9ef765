// Package wan builds an emulated wide-area network on one Linux machine and
// runs commands in it: one network namespace per host, a TUN device in each
// with an address 10.77.0.i/24, and an in-process emu.Forwarder that joins the
// devices through links with the delays and rates of a Profile (the paper's
// geographies: usa, usa-europe, global). TCP settings for long fat links are
// set inside the namespaces only. Everything a Net creates carries a unique
// run name (iwan.<pid>.<random>) and is removed by Net.Close, and Cleanup
// removes what a killed run left behind. It needs root and /dev/net/tun.
package wan
