package outbox

import (
	"time"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// State is the state of an outbox row, as the configuration's status
// lists, timestamps and lease columns decide it (Rules.Classify).
type State int

// The states a row can be in. Pending, InFlight and LeaseExpired rows are
// unpublished.
const (
	Pending State = iota
	InFlight
	LeaseExpired
	Dead
	Published
	// Ignored is a row whose status is in none of the configured lists: it
	// is neither counted nor read.
	Ignored
)

// UnpublishedStates are the states of rows not yet published nor dead.
var UnpublishedStates = []State{Pending, InFlight, LeaseExpired}

// GaugeStates are the values of the state label of outbox_events.
var GaugeStates = []State{Pending, InFlight, LeaseExpired, Dead}

// String is the state label value.
func (s State) String() string {
	switch s {
	case Pending:
		return vocab.StatePending
	case InFlight:
		return vocab.StateInFlight
	case LeaseExpired:
		return vocab.StateLeaseExpired
	case Dead:
		return vocab.StateDead
	case Published:
		return vocab.StatePublished
	default:
		return vocab.StateIgnored
	}
}

// MarshalText makes a State its label value in JSON answers.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Facts are what a query reads about one row (or one group of rows that
// share them); Classify decides the row's state from them.
type Facts struct {
	// Status is the status column's value as text ("" without a status
	// column). Integer statuses are in their canonical decimal form.
	Status string
	// PublishedSet and DeadSet: published_at / dead_at is not null.
	PublishedSet, DeadSet bool
	// ClaimSet: the claim column (claimed_at, else lease_until) is not null.
	ClaimSet bool
	// LeasePassed: lease_until, or claimed_at + lease_ttl, is in the past.
	// False when there is no lease to judge.
	LeasePassed bool
	// Attempted: attempts > 0.
	Attempted bool
	// UnknownWhen: the unknown_when predicate is true.
	UnknownWhen bool
}

// Rules are an outbox's configuration, normalised for the decisions.
type Rules struct {
	Style       config.StateStyle
	pending     map[string]bool
	inFlight    map[string]bool
	published   map[string]bool
	dead        map[string]bool
	unknown     map[string]bool
	hasInFlight bool
	hasDeadAt   bool
	hasPubAt    bool
}

// NewRules normalises o. With integer statuses (intStatus) the configured
// values are parsed and kept in canonical form, so that "01" and "1" match.
func NewRules(o *config.Outbox, intStatus bool) (*Rules, error) {
	r := &Rules{
		Style:       o.Style(),
		hasDeadAt:   o.DeadAt != "",
		hasPubAt:    o.PublishedAt != "",
		hasInFlight: len(o.InFlight) > 0,
	}
	var err error
	set := func(vals []string) map[string]bool {
		m := map[string]bool{}
		for _, v := range vals {
			c, e := outboxsql.CanonicalStatus(v, intStatus)
			if e != nil && err == nil {
				err = e
			}
			m[c] = true
		}
		return m
	}
	r.pending = set(o.Pending)
	r.inFlight = set(o.InFlight)
	r.published = set(o.Published)
	r.dead = set(o.Dead)
	r.unknown = set(o.Unknown)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Classify decides the state of a row from its facts.
//
// With a status column the status decides whether a row is published,
// dead or unpublished; a status listed nowhere is Ignored, and a status
// listed only under unknown is taken as claimed (a relay wrote it after
// claiming the row). With timestamps, published_at set means published and
// dead_at set means dead; a delete-on-publish table has only unpublished
// rows.
//
// An unpublished row is claimed when its status is in in_flight (or only
// in unknown); when no in_flight statuses are configured, when its claim
// column (claimed_at, else lease_until) is set. A claimed row is
// LeaseExpired once its lease has passed, else InFlight: a claimed row
// without a lease to judge stays InFlight. Every other unpublished row is
// Pending.
func (r *Rules) Classify(f Facts) State {
	claimed := false
	switch r.Style {
	case config.StyleStatus:
		switch {
		case r.published[f.Status]:
			return Published
		case r.dead[f.Status]:
			return Dead
		case r.inFlight[f.Status]:
			claimed = true
		case r.pending[f.Status]:
			claimed = !r.hasInFlight && f.ClaimSet
		case r.unknown[f.Status]:
			claimed = true
		default:
			return Ignored
		}
	case config.StyleTimestamps:
		switch {
		case r.hasPubAt && f.PublishedSet:
			return Published
		case r.hasDeadAt && f.DeadSet:
			return Dead
		}
		claimed = f.ClaimSet
	default:
		claimed = f.ClaimSet
	}
	if !claimed {
		// Without in_flight statuses and a claim column, nothing is ever
		// claimed: such a table has only pending rows.
		return Pending
	}
	if f.LeasePassed {
		return LeaseExpired
	}
	return InFlight
}

// Unknown reports whether an unpublished row in state s has an unknown
// publish result: its status is in unknown, its lease expired after a
// publish attempt had begun (attempts > 0), or the unknown_when predicate
// holds. The broker may already hold such a row, so a retry may duplicate
// it (the relay died after sending and before marking the row).
// Published, dead and ignored rows never have one.
func (r *Rules) Unknown(s State, f Facts) bool {
	switch s {
	case Pending, InFlight, LeaseExpired:
	default:
		return false
	}
	return r.unknown[f.Status] && r.Style == config.StyleStatus ||
		s == LeaseExpired && f.Attempted ||
		f.UnknownWhen
}

// Deadline returns the deadline of rows whose label values are vals: the
// override for the first label's value, else the outbox's deadline. A
// value folded into "other" has the outbox's deadline unless "other" has
// an override itself.
func Deadline(o *config.Outbox, vals []string) time.Duration {
	if len(vals) == 0 {
		return o.Deadline
	}
	return o.DeadlineFor(vals[0])
}

// Late reports whether an event published latency after its creation
// missed deadline.
func Late(latency, deadline time.Duration) bool { return latency > deadline }
