// Package account holds robust averaging's accountability: what a member
// of a run concludes about the others from the direct scatter's verdicts
// (docs/robust.md). It is pure, like mesh: no goroutines, clock or network.
// A Member is fed the results of its attempts and the verdict reports that
// arrive, and returns Actions: a report to publish, members to exclude with
// the evidence, chunks to audit.
//
//   - The offence rule (offence.go): an owner excludes a member whose
//     contributions to its segments it flagged in ExcludeAfter steps in a
//     row, that pointed against the others' in OpposeAfter of the last
//     OpposeWindow steps, or that claimed a weight over H.
//   - Verdict reports (report.go, book.go): every owner publishes what its
//     rule saw of each member; each member checks its own entry against what
//     it sent and excludes an owner that lies.
//   - Audits (audit.go): a member picks, with private randomness, chunks of
//     other owners' segments to recompute; an owner on probation (new to
//     the member) is audited every step.
//
// A driver (node/account.go) runs it like this, under a lock of its own:
//
//	m := account.New(account.Config{Self: self})
//	// After each successful attempt of the direct scatter:
//	acts, err := m.Observe(ring, cfg, result)
//	carryOut(acts) // publish acts.Publish on Topic, exclude acts.Exclude, run acts.Audit
//	// For each message of Topic, signed by from:
//	acts, err = m.Receive(from, data)
//	carryOut(acts)
//	// For each audit answered by its owner:
//	if err := audit.Check(inputs); errors.Is(err, account.ErrForged) {
//		exclude(audit.Exclusion(err))
//	}
//
// In-process runs (node/diloco) use Judge, the offence rule of every owner
// of a run in one place.
package account
