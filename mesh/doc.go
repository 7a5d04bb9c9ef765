// Package mesh is the membership and epoch state machine of the network:
// which peers form the ring of each outer step, who fetches which model. It
// imports only the standard library: no goroutines, no clock, no network.
// The all-reduce that a decided ring runs — the algorithm over an abstract
// transport and its int8 codec — is package mesh/collective.
//
// # The state machine
//
// Mesh is driven from outside, like etcd-io/raft: node calls Tick at a fixed
// interval (DefaultTickMillis), feeds every message of the run's gossipsub
// topic (Topic) to Step after Decode, tells it what the trainer did
// (SetReady, Completed, ReportFailure, Synced, Leave), and carries out what
// Ready asks — publish Ready.Messages (Encode), start the all-reduce of
// Ready.Ring, fetch the model of Ready.Fetch or Ready.Adopt — then calls
// Advance:
//
//	for {
//		select {
//		case <-ticker.C:
//			m.Tick()
//		case b := <-gossip:
//			msg, err := mesh.Decode(b) // and check msg.From is the signer
//			if err == nil {
//				err = m.Step(msg)
//			}
//		case res := <-allReduceDone: // of ring r
//			if res.err == nil {
//				m.Completed(r.Step, newHash) // hash of the new θ₀
//			} else { // e.g. a *PeerError naming rank i
//				m.ReportFailure(r.Step, r.Members[i])
//			}
//		}
//		if m.HasReady() {
//			rd := m.Ready()
//			// publish rd.Messages; start the all-reduce of rd.Ring with
//			// rank rd.Ring.Rank(self), weights rd.Ring.Weights, and
//			// rd.Ring.ID in the handshake; fetch rd.Fetch / rd.Adopt
//			// then call Synced; abort a running all-reduce when one of
//			// its members is in rd.Dead
//			m.Advance(rd)
//		}
//	}
//
// The trainer runs the inner steps of the model Model() while State() is
// StateTraining, calls SetReady(step, innerSteps) when done, and stops
// when the state leaves Training/Ready/Agreeing/Reducing (a Fetch or Adopt
// replaces its model).
//
// # Agreement of one outer step t
//
// Every member holds θ₀(t) with hash h. When its inner steps are done it sends
// Ready(t, inner, h). It votes once every live peer at (t, h) is Ready, or
// StragglerTicks after its own Ready, or at once when some peer already voted
// (and, while it holds the run's initial model or has not been in a ring
// since it started, only once MinMembers are Ready: no ring below the
// minimum is voted for or decided then). A vote is
// Propose(t, round, P, X): P = sorted(M − X) with weights, where M are the
// peers known Ready at (t, h) — from Ready messages, heartbeats, and the
// members of every vote heard — and X the peers excluded from step t. A
// vote carries the voter's own accusations: the peers it saw dead (missed
// heartbeats), gone (Leave, or back to syncing), failing (ReportFailure),
// restarted, silent in a timed-out round, unreachable, or equivocating. X
// is what a node saw itself plus what the accusations heard add, weighed
// (exclusions in agree.go): an accusation the accused disputes, by voting
// on in a round at least the accusation's, excludes the accuser, and the
// accused with it if it is the accuser's only dispute; an accusation made
// by more than ⌊(n−1)/2⌋ peers, or undisputed, stands. So a member that
// lies about others costs a step at most one member besides itself, and an
// accused node contests (votes) before it sits a step out. M and the
// accusations only grow within a step and every node hears the same votes,
// so views converge.
//
// With Config.AdmitRate, newcomers — peers that made none of the line's
// last MadeWindow models (History, handed to joiners with the model by
// Synced) — are admitted max(1, ⌊AdmitRate · established⌋) a step, chosen
// by a hash of the step's model and their ids; their accusations carry no
// weight (admit.go). Limits apply once the line is MadeWindow steps old.
//
// A node decides when the latest vote of every other member of its vote is
// its vote, same round: the ring is P, its id hash(t, round, P). A vote is
// refuted — and the node votes again, in the next round or the highest seen
// — when a member voted otherwise in the same round, voted in a later round,
// or is in X. Each node votes once per round, so two rings decided in one
// round never share a member; a node that decided stays in its round until
// the all-reduce ends, so a later round cannot decide a ring that shares a
// member with a ring that completes. A Ready node left out of the decided
// ring (it was late, or excluded) waits; when peers show up at step t+1
// with PrevHash h it is asked to Fetch that model (it joins for t+1).
//
// After ReportFailure(t, peer) the peer is excluded and the survivors agree
// a new ring for the same step t in the next round: no outer step is lost.
//
// # Joining, leaving, divergence
//
// A node created without a model (New with hash "") is Joining: it picks the
// largest side among its peers' heartbeats and asks to Fetch its newest
// model, then calls Synced; it may then run fewer inner steps and be Ready
// for the current step, and is in that step's ring if its Ready arrives
// before the decision. Leave sends a deathrattle that peers act on at once.
// A restarted node passes its checkpoint's step and hash to New and fetches
// if its line moved on.
//
// Every message carries the sender's Config.Incarnation; a higher one means
// the peer restarted: its votes are dropped and it sits out the current
// step. Late messages of its previous run are ignored.
//
// Peers report (step, hash, PrevHash). A side is the peers at one model plus
// those one step further on that line. When sides differ (a partition
// healed, a restart far behind), a member whose side is smaller is asked to
// Adopt the larger side's newest model by checkpoint transfer. Sides are
// weighed first by how many of their peers the member knows (they made a
// model of its line with it in the last KnownWindow steps, or signed a
// ring with a peer it knows: identities are free, and a fork served by
// many made-up peers must not win), then by their size, later step,
// larger hash. A member with no known peer on its
// side, and a joiner, weigh by size alone.
//
// Safety rests on the all-reduce too: its handshake compares ring ids, so a
// node that decided a ring its neighbours did not aborts and reports
// failure. Two disjoint rings can complete in one step only if Ready
// messages and heartbeats between them were lost for StragglerTicks — which
// is a partition, healed as above. docs/mesh.md has the argument and the
// measured figures; docs/mesh-defence.md the defences against lying
// members and made-up peers (accusations, admission, known peers).
package mesh
