package main

import (
	"fmt"
	"os"
	"time"

	"github.com/intellect-node/intellect-node/internal/wan"
)

// resolve returns the profile and the harness options the flags ask for.
func (f *netFlags) resolve() (wan.Profile, wan.Options, error) {
	p, err := f.loadProfile()
	if err != nil {
		return wan.Profile{}, wan.Options{}, err
	}
	scale, err := f.scale()
	if err != nil {
		return wan.Profile{}, wan.Options{}, err
	}
	return p, wan.Options{RateScale: scale, MTU: f.mtu, Seed: f.seed, NoOffload: !f.offload, Log: f.logger()}, nil
}

func (f *netFlags) loadProfile() (wan.Profile, error) {
	if f.profileFile == "" {
		return wan.Lookup(f.profile)
	}
	r, err := os.Open(f.profileFile)
	if err != nil {
		return wan.Profile{}, err
	}
	defer r.Close()
	return wan.DecodeProfile(r)
}

// scale is -rate-scale, or the scale -model-bytes and -outer-step imply, or 1.
func (f *netFlags) scale() (float64, error) {
	switch {
	case f.rateScale < 0:
		return 0, fmt.Errorf("-rate-scale %v must be positive", f.rateScale)
	case f.rateScale > 0:
		return f.rateScale, nil
	case f.modelBytes == 0 && f.outerStep == "":
		return 1, nil
	}
	step, err := time.ParseDuration(f.outerStep)
	if err != nil || step <= 0 || f.modelBytes <= 0 {
		return 0, fmt.Errorf("-model-bytes (> 0) and -outer-step (a duration) go together")
	}
	return wan.RateScale(f.modelBytes, step), nil
}
