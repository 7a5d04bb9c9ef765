package wan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Paper-scale rates, derived in docs/wan.md from INTELLECT-1's reported
// compute utilization (96 % across the USA, 83 % across three continents)
// and its 10 GB per node per 38-minute outer step.
const (
	rateUS     = 1250 // Mbit/s between US sites (4 nodes, ≈ 95 s all-reduce of 15 GB per node)
	rateTransA = 600  // Mbit/s across the Atlantic, between the US and the global case
	rateGlobal = 300  // Mbit/s between continents (14 nodes, ≈ 470 s for 18.6 GB per node)
	rateIntra  = 1000 // Mbit/s within a region in the global profile
	lossGlobal = 1e-4 // random loss on intercontinental paths

	// home: a contributor's 100 Mbit/s fibre, next to an H100 training a
	// 1 B-parameter model (docs/wan.md, "Home links").
	rateHomeUplink = 100 // Mbit/s each way, shared by a member's peers
	homeRefBytes   = 1e9 // int8 pseudo-gradient of 1 B parameters
	homeRefStepS   = 1.0 // s per inner step: 6 × 1e9 × 64 Ki tokens at ≈ 400 TFLOP/s
)

// Profiles returns the built-in geographies, modelled on INTELLECT-1's runs.
func Profiles() []Profile {
	return []Profile{usa(), usaEurope(), global(), home()}
}

// Lookup returns the built-in profile with the given name.
func Lookup(name string) (Profile, error) {
	var names []string
	for _, p := range Profiles() {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	return Profile{}, fmt.Errorf("%w: no profile %q (have %s)", ErrProfile, name, strings.Join(names, ", "))
}

// Pair is a two-host profile (hosts a and b) with one path, for tests and
// link measurements.
func Pair(rttMS, rateMbit, loss float64) Profile {
	return Profile{
		Name:  "pair",
		About: fmt.Sprintf("two hosts, %g ms RTT, %g Mbit/s, loss %g", rttMS, rateMbit, loss),
		Hosts: []ProfileHost{{Name: "a"}, {Name: "b"}},
		Paths: []Path{{A: "a", B: "b", RTTMS: rttMS, RateMbit: rateMbit, Loss: loss}},
	}
}

// maxProfileBytes bounds a profile file.
const maxProfileBytes = 1 << 20

// DecodeProfile reads a JSON profile of at most 1 MiB, rejecting unknown
// fields, and validates it.
func DecodeProfile(r io.Reader) (Profile, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxProfileBytes+1))
	if err != nil {
		return Profile{}, fmt.Errorf("wan: read profile: %w", err)
	}
	if len(data) > maxProfileBytes {
		return Profile{}, fmt.Errorf("%w: larger than %d bytes", ErrProfile, maxProfileBytes)
	}
	var p Profile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Profile{}, fmt.Errorf("%w: %w", ErrProfile, err)
	}
	return p, p.Validate()
}

func hosts(region string, names ...string) []ProfileHost {
	hs := make([]ProfileHost, len(names))
	for i, n := range names {
		hs[i] = ProfileHost{Name: n, Region: region}
	}
	return hs
}

// usa is four sites across the United States, 20–70 ms apart.
func usa() Profile {
	r := float64(rateUS)
	return Profile{
		Name:  "usa",
		About: "4 nodes across the USA (San Francisco, Dallas, Chicago, New York), 20-70 ms RTT",
		Hosts: hosts("us", "sfo", "dfw", "chi", "nyc"),
		Paths: []Path{
			{"sfo", "dfw", 40, r, 0}, {"sfo", "chi", 50, r, 0}, {"sfo", "nyc", 70, r, 0},
			{"dfw", "chi", 25, r, 0}, {"dfw", "nyc", 40, r, 0}, {"chi", "nyc", 20, r, 0},
		},
	}
}

// usaEurope is two US and two European sites, about 90 ms across.
func usaEurope() Profile {
	us, x := float64(rateUS), float64(rateTransA)
	return Profile{
		Name:  "usa-europe",
		About: "2 nodes in the USA (Virginia, Chicago) + 2 in Europe (London, Frankfurt), ~90 ms across",
		Hosts: append(hosts("us", "iad", "chi"), hosts("eu", "lon", "fra")...),
		Paths: []Path{
			{"iad", "chi", 20, us, 0}, {"lon", "fra", 15, us, 0},
			{"iad", "lon", 80, x, 0}, {"iad", "fra", 90, x, 0},
			{"chi", "lon", 95, x, 0}, {"chi", "fra", 100, x, 0},
		},
	}
}

// global is two sites on each of three continents, 150–300 ms across, at
// lower rates and with a little random loss between continents.
func global() Profile {
	in, x, l := float64(rateIntra), float64(rateGlobal), lossGlobal
	return Profile{
		Name:  "global",
		About: "2 nodes each in the USA, Europe and Asia; 150-300 ms RTT between continents at lower rates",
		Hosts: append(append(hosts("us", "sfo", "iad"), hosts("eu", "lon", "fra")...), hosts("asia", "sin", "tyo")...),
		Paths: []Path{
			{"sfo", "iad", 65, in, 0}, {"lon", "fra", 15, in, 0}, {"sin", "tyo", 70, in, 0},
			{"iad", "lon", 150, x, l}, {"iad", "fra", 160, x, l}, {"sfo", "lon", 170, x, l}, {"sfo", "fra", 180, x, l},
			{"sfo", "tyo", 150, x, l}, {"sfo", "sin", 200, x, l}, {"iad", "tyo", 220, x, l}, {"iad", "sin", 260, x, l},
			{"fra", "sin", 240, x, l}, {"lon", "sin", 250, x, l}, {"lon", "tyo", 280, x, l}, {"fra", "tyo", 300, x, l},
		},
	}
}

// home is four contributors at home, two in Europe and two in the USA,
// 40–150 ms apart, each behind a 100 Mbit/s link. A member of the direct
// scatter sends to and receives from its three peers at once, so each path
// gets a third of the link; the rates belong with a 1 B-parameter model on
// an H100 (Profile.Inner), whatever H.
func home() Profile {
	r := float64(rateHomeUplink) / 3
	return Profile{
		Name:  "home",
		About: "4 homes (Amsterdam, Madrid, New York, Denver) on 100 Mbit/s links, 40-150 ms RTT; rates as for a 1B model on an H100",
		Hosts: append(hosts("eu", "ams", "mad"), hosts("us", "nyc", "den")...),
		Paths: []Path{
			{"ams", "mad", 40, r, 0}, {"nyc", "den", 50, r, 0},
			{"ams", "nyc", 90, r, 0}, {"mad", "nyc", 100, r, 0},
			{"ams", "den", 130, r, 0}, {"mad", "den", 150, r, 0},
		},
		Inner: &InnerRef{Bytes: homeRefBytes, StepS: homeRefStepS},
	}
}
