package main

import (
	"testing"

	"github.com/intellect-node/intellect-node/node"
)

// TestStormJoinersTrainOnce: each storm joiner must train once, not all at
// one instant: one that trained and then sat out (a partition) has joined;
// a slot whose joiner exited and holds another member no longer counts.
func TestStormJoinersTrainOnce(t *testing.T) {
	r := testRunner(t, 3)
	var js []*stormJoiner
	for _, s := range r.slots {
		s.state, s.id = up, "id-"+s.host
		js = append(js, &stormJoiner{s: s, gen: s.gen})
	}
	train := func(s *slot, on bool) {
		s.status = node.Status{}
		if on {
			s.status = node.Status{OuterStep: 5, Members: []string{s.id, "other"}}
		}
	}
	train(r.slots[0], true)
	if stormTrained(js) {
		t.Fatal("all trained with two joiners yet to train")
	}
	train(r.slots[0], false) // sits a step out
	train(r.slots[1], true)
	r.slots[2].gen++ // exited; the slot holds another member
	if !stormTrained(js) {
		t.Fatalf("trained %v %v: the running joiners trained, one at a time", js[0].trained, js[1].trained)
	}
}
