package reconcile

import "github.com/outbox-exporter/outbox_exporter/internal/vocab"

// Kind is a kind of reconcile gap.
type Kind string

// The kinds of gap, in the order they are reported; their values are
// the kind label of outbox_reconcile_gaps.
const (
	// MissingOutbox: a judged authority row whose current version has no
	// outbox row: the local transaction path lost the event.
	MissingOutbox Kind = vocab.GapMissingOutbox
	// MissingTarget: no target row for a judged key whose event was
	// published (or, without an outbox, for any judged key).
	MissingTarget Kind = vocab.GapMissingTarget
	// StaleTarget: the target holds an older version than the authority,
	// although the current version's event was published.
	StaleTarget Kind = vocab.GapStaleTarget
	// OrphanTarget: a target row whose key the authority does not have, or
	// whose version is ahead of the authority's.
	OrphanTarget Kind = vocab.GapOrphanTarget
	// DuplicateTarget: more than one target row for one key. The other
	// kinds judge such a key by its highest target version.
	DuplicateTarget Kind = vocab.GapDuplicateTarget
)

// Kinds lists every kind, in report order.
var Kinds = []Kind{MissingOutbox, MissingTarget, StaleTarget, OrphanTarget, DuplicateTarget}

// OutboxState is what the outbox says about the event of an authority
// row's current version.
type OutboxState uint8

const (
	// OutboxNone: the job has no outbox configured.
	OutboxNone OutboxState = iota
	// OutboxAbsent: no outbox row for the key and version. For a
	// delete-on-publish outbox this is the normal state of a published
	// event; for the other styles it is a missing_outbox gap.
	OutboxAbsent
	// OutboxUnpublished: the row is pending, claimed or otherwise not yet
	// published.
	OutboxUnpublished
	// OutboxPublished: the row is marked published.
	OutboxPublished
	// OutboxDead: the row was abandoned (dead); it will never reach the
	// target, which the outbox collector reports, so it is no target gap.
	OutboxDead
)

func (s OutboxState) String() string {
	switch s {
	case OutboxAbsent:
		return "absent"
	case OutboxUnpublished:
		return "unpublished"
	case OutboxPublished:
		return "published"
	case OutboxDead:
		return "dead"
	}
	return ""
}

// Observation is what one read of all sides saw for one key.
type Observation struct {
	// InAuthority is false when the authority has no row for the key.
	InAuthority bool
	// Version is the authority's current version; VersionNull says it is
	// NULL, a value of its own that sorts before every integer.
	Version     int64
	VersionNull bool
	// Judged is true when the authority row is old enough (created before
	// now - grace) and, for a windowed run, created within the window.
	Judged bool

	// Outbox is the state of the outbox row for (key, Version).
	Outbox OutboxState
	// OutboxJudged is false when the event was published within grace
	// (by the outbox's published_at): the target has not had grace to
	// apply it yet. Where no column dates the publication it is true, and
	// the runner confirms a target gap only if it persists for grace.
	OutboxJudged bool
	// DeleteOnPublish is true when the outbox deletes rows on publish: an
	// absent row then means published, and missing_outbox cannot be told
	// apart from it, so it is never reported.
	DeleteOnPublish bool

	// HasTarget is true when the job has a target configured.
	HasTarget bool
	// InTarget is false when the target has no row for the key.
	InTarget bool
	// TargetVersion is the target's version (the highest, for a key held
	// more than once); TargetVersionNull says it is NULL.
	TargetVersion     int64
	TargetVersionNull bool
	// TargetRows is how many target rows hold the key.
	TargetRows int
}

// compareVersions orders versions with NULL before every integer: a NULL
// target version is behind any authority version, and a target version
// ahead of a NULL authority version is an orphan.
func compareVersions(a int64, aNull bool, b int64, bNull bool) int {
	switch {
	case aNull && bNull:
		return 0
	case aNull:
		return -1
	case bNull:
		return 1
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Classify returns the gaps one key shows, in Kinds order: none, one, or
// missing_outbox together with orphan_target (an outbox row lost for a
// version the target is already ahead of), and duplicate_target for a key
// the target holds more than once.
func Classify(o Observation) []Kind {
	kinds := classify(o)
	if o.HasTarget && o.InTarget && o.TargetRows > 1 {
		kinds = append(kinds, DuplicateTarget)
	}
	return kinds
}

func classify(o Observation) []Kind {
	var kinds []Kind
	if !o.InAuthority {
		if o.HasTarget && o.InTarget {
			kinds = append(kinds, OrphanTarget)
		}
		return kinds
	}
	if !o.Judged {
		return nil
	}
	// published says whether the current version's event should have
	// reached the target by now.
	published := true
	switch {
	case o.Outbox == OutboxNone:
	case o.DeleteOnPublish:
		// Present means not yet published; absent means published.
		published = o.Outbox == OutboxAbsent
	case o.Outbox == OutboxAbsent:
		kinds = append(kinds, MissingOutbox)
		published = false
	default:
		published = o.Outbox == OutboxPublished && o.OutboxJudged
	}
	if !o.HasTarget {
		return kinds
	}
	c := compareVersions(o.TargetVersion, o.TargetVersionNull, o.Version, o.VersionNull)
	switch {
	case o.InTarget && c > 0:
		kinds = append(kinds, OrphanTarget)
	case !published:
	case !o.InTarget:
		kinds = append(kinds, MissingTarget)
	case c < 0:
		kinds = append(kinds, StaleTarget)
	}
	return kinds
}
