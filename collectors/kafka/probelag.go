package kafka

import "time"

// A partition's time lag as its cached probe answers it, taken when the
// plan looks the entry up and finished against the clock when the
// partition is decided.

// Time lag as a cached probe answers it for a partition, apart from the
// clock (lagKind of partPlan).
const (
	lagUnknown uint8 = iota // no probe, or no age to tell
	lagZero                 // nothing a consumer can read below the high watermark
	lagAged                 // the first unread record's timestamp is lagMs
)

// lag is what Decide makes of the cached probe for a partition whose
// high watermark is end, except the subtraction from now: taken while the
// entry was just looked up, so that deciding the partition later does not
// read the entry again (at 10,000 groups the entries are spread over
// megabytes, and reading each a second time was 6% of a steady scrape's
// CPU, in cache misses). decideCached finishes it; TestDecideCached
// holds the two to Decide.
func (cp *cachedProbe) lag(end int64) (kind uint8, ms int64) {
	switch {
	case cp.found && cp.offset < end && (!cp.stamped || time.UnixMilli(cp.ms).IsZero()):
		// get's Timestamp is zero: the age is unknown.
		return lagUnknown, 0
	case cp.found && cp.offset < end:
		return lagAged, cp.ms
	case cp.found || cp.next >= end, cp.next >= cp.stable:
		return lagZero, 0
	}
	return lagUnknown, 0
}

// setProbe makes cp pp's probe.
func (pp *partPlan) setProbe(cp *cachedProbe) {
	pp.probe = cp
	pp.lagKind, pp.lagMs = cp.lag(pp.o.End)
}

// decideCached is Decide for a partition that is behind, from its cached
// probe's lag.
func decideCached(o Offsets, kind uint8, ms int64, now time.Time) Partition {
	msgs, msgsOK := Messages(o)
	out := Partition{Messages: msgs, MessagesOK: msgsOK}
	switch kind {
	case lagAged:
		out.Seconds = max(now.Sub(time.UnixMilli(ms)).Seconds(), 0)
		out.SecondsOK = true
	case lagZero:
		out.SecondsOK = true
	}
	return out
}
