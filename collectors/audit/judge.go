package audit

import "time"

// Class is what the outbox says about a row.
type Class uint8

// Row classes, as the outbox query returns them.
const (
	Unpublished Class = iota
	Published
	Dead
	// Ignored: a status listed nowhere in the configuration; not judged.
	Ignored
)

// String names the class in API answers.
func (c Class) String() string {
	switch c {
	case Published:
		return "published"
	case Dead:
		return "dead"
	case Ignored:
		return "ignored"
	}
	return "unpublished"
}

// Observation is one sampled outbox row next to what the topics hold for
// its id.
type Observation struct {
	ID    string
	Class Class
	// MarkedAt is when the row was marked published: its published_at, or,
	// without that column, when this process first saw it published.
	MarkedAt time.Time
	// OnTopic reports whether a record with the id is in the window;
	// OnTopicAt is the latest time the earliest such record can carry.
	OnTopic   bool
	OnTopicAt time.Time
}

// Verdict is the audit's judgement of one row.
type Verdict uint8

// Verdicts. NotJudged rows are inside grace or not comparable (dead).
const (
	NotJudged Verdict = iota
	Consistent
	MissingInBroker
	UnmarkedInBroker
	// DeadInBroker: a row given up as dead whose event is on the topics
	// anyway: consumers applied an event the outbox says was abandoned.
	DeadInBroker
)

// Judge compares one sampled row with the topics at time now. A published
// row is judged grace after it was marked: missing if its id is not on the
// topics by then (silent loss). An unpublished row is judged grace after
// its id reached the topics: unmarked if still unpublished then (the
// acknowledgement was lost; a retry will duplicate). A dead row whose id
// is on the topics is reported at once (dead is final; the event went
// out although the outbox gave it up); a dead row not on the topics is
// what the outbox collector reports.
func Judge(o Observation, now time.Time, grace time.Duration) Verdict {
	switch o.Class {
	case Published:
		if o.MarkedAt.IsZero() || now.Sub(o.MarkedAt) < grace {
			return NotJudged
		}
		if o.OnTopic {
			return Consistent
		}
		return MissingInBroker
	case Unpublished:
		if !o.OnTopic {
			return Consistent
		}
		if now.Sub(o.OnTopicAt) < grace {
			return NotJudged
		}
		return UnmarkedInBroker
	case Dead:
		if o.OnTopic {
			return DeadInBroker
		}
		return Consistent
	}
	return NotJudged
}
