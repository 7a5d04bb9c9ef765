package main

import (
	"fmt"
	"slices"

	"github.com/intellect-node/intellect-node/internal/nat"
)

// event is what a case does to one member while the run goes on.
type event int

const (
	// noEvent lets every member train to the end.
	noEvent event = iota
	// restart SIGKILLs a NATed member once every member has reached the
	// event step, then starts it again with the same home.
	restart
	// leave sends SIGINT to the public member (a graceful leave) once every
	// member has reached the event step.
	leave
)

// caseSpec is one lab case: the sites' connections and what happens.
type caseSpec struct {
	// Name is short: nonat, a, b, c, d.
	Name string
	// About is the one-line description printed with the results.
	About string
	// Kinds are the sites' connections, the public member first.
	Kinds []nat.Kind
	// Event and EventSite: what happens, to which site.
	Event     event
	EventSite int
}

// Sites of every case: the usa profile's four (sfo, dfw, chi, nyc, 20–70 ms
// apart); site 0 is the public member everybody bootstraps from.
var cases = []caseSpec{
	{Name: "nonat", About: "4 public members (the reference: same sites, same delays, no NAT)",
		Kinds: []nat.Kind{nat.Public, nat.Public, nat.Public, nat.Public}},
	{Name: "a", About: "1 public + 3 behind cone NATs",
		Kinds: []nat.Kind{nat.Public, nat.Cone, nat.Cone, nat.Cone}},
	{Name: "b", About: "1 public + 2 cone + 1 symmetric NAT",
		Kinds: []nat.Kind{nat.Public, nat.Cone, nat.Cone, nat.Symmetric}},
	{Name: "c", About: "1 public + 3 cone; the member at chi SIGKILLed and restarted with its home",
		Kinds: []nat.Kind{nat.Public, nat.Cone, nat.Cone, nat.Cone}, Event: restart, EventSite: 2},
	{Name: "d", About: "1 public + 3 cone; the public member leaves (SIGINT) after the others connected",
		Kinds: []nat.Kind{nat.Public, nat.Cone, nat.Cone, nat.Cone}, Event: leave, EventSite: 0},
}

// lookupCases returns the named cases in the order of cases.
func lookupCases(names []string) ([]caseSpec, error) {
	var out []caseSpec
	for _, n := range names {
		if !slices.ContainsFunc(cases, func(c caseSpec) bool { return c.Name == n }) {
			return nil, fmt.Errorf("natlab: unknown case %q (have nonat, a, b, c, d)", n)
		}
	}
	for _, c := range cases {
		if slices.Contains(names, c.Name) {
			out = append(out, c)
		}
	}
	return out, nil
}

// natPairs returns the pairs (i < j) of sites that are both behind NAT of
// kind k (cone–cone pairs are the ones hole punching must connect).
func natPairs(kinds []nat.Kind, k nat.Kind) [][2]int {
	var out [][2]int
	for i := range kinds {
		for j := i + 1; j < len(kinds); j++ {
			if kinds[i] == k && kinds[j] == k {
				out = append(out, [2]int{i, j})
			}
		}
	}
	return out
}
