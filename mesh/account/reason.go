package account

import "github.com/intellect-node/intellect-node/mesh"

// Reason says which rule excluded a member. Append only.
type Reason uint8

const (
	// ReasonWeight: it claimed more inner steps than the run's H.
	ReasonWeight Reason = iota + 1
	// ReasonFlagged: its contributions were clipped hard or rejected in
	// ExcludeAfter steps in a row.
	ReasonFlagged
	// ReasonOpposed: its contributions pointed against the others' in
	// OpposeAfter of the last OpposeWindow steps.
	ReasonOpposed
	// ReasonFalseReport: as an owner it published a verdict report that
	// misstates what this member sent.
	ReasonFalseReport
	// ReasonAudit: as an owner it failed an audit.
	ReasonAudit
)

// String names the reason as the node's metrics label it.
func (r Reason) String() string {
	switch r {
	case ReasonWeight:
		return "weight"
	case ReasonFlagged:
		return "flagged"
	case ReasonOpposed:
		return "opposed"
	case ReasonFalseReport:
		return "false_report"
	case ReasonAudit:
		return "audit"
	}
	return "unknown"
}

// Exclusion is a member to exclude from the run, with the evidence.
type Exclusion struct {
	Member   mesh.PeerID
	Reason   Reason
	Evidence string
}
