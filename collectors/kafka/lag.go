// Package kafka collects consumer-group lag of one Kafka cluster, in
// messages and in seconds, against each group's deadline.
//
// lag.go holds the decisions, apart from any I/O: offset lag of a
// partition, where the oldest unconsumed record of a partition is, whether
// a cached record probe still answers, time lag, and which groups and
// topics get series. plan.go decides, also without I/O, which partitions
// count and which records must be read, and keeps the probe cache.
// probe.go and batches.go read the first record at an offset with raw
// Fetch requests; groups.go and offsets.go ask the cluster for groups,
// commits and offsets; collector.go runs a collection and exports the
// series. Nothing here returns -1 or NaN: an
// unknown value is reported as unknown, and the caller leaves the series
// out.
package kafka

import (
	"slices"
	"sort"
	"strings"
	"time"
)

// NoCommit is the committed offset of a partition the group never
// committed to.
const NoCommit int64 = -1

// Offsets is what is known of one partition for one group.
type Offsets struct {
	// Commit is the group's committed offset, or NoCommit.
	Commit int64
	// Start is the log start offset; StartKnown says whether it was listed.
	Start      int64
	StartKnown bool
	// End is the high watermark.
	End int64
}

// Committed reports whether the group has committed to the partition.
func (o Offsets) Committed() bool { return o.Commit >= 0 }

// Messages is the offset lag of a partition: the high watermark minus the
// committed offset, or, for a partition without a commit, minus the log
// start offset (kadm's rule: a group that never committed has all that is
// still in the log ahead of it). It is never negative. ok is false when the
// lag cannot be known: an uncommitted partition whose start is not listed.
func Messages(o Offsets) (lag int64, ok bool) {
	switch {
	case o.Committed():
		lag = o.End - o.Commit
	case o.StartKnown:
		lag = o.End - o.Start
	default:
		return 0, false
	}
	return max(lag, 0), true
}

// Oldest returns the offset from which the oldest record the group has not
// consumed is searched: the commit, or the log start when there is no
// commit or when retention deleted the committed offset. behind is false
// when the group has consumed everything up to the high watermark; then no
// record has to be read.
func Oldest(o Offsets) (from int64, behind bool) {
	switch {
	case o.Committed() && (!o.StartKnown || o.Commit >= o.Start):
		from = o.Commit
	case o.StartKnown:
		from = o.Start
	default:
		// Uncommitted and no start offset: read from 0; the broker
		// answers with the log start (the caller retries there).
		from = 0
	}
	return from, from < o.End
}

// Probe is what reading a partition from an offset found, read with
// read_committed isolation: control records (transaction markers) and
// records of aborted transactions are not data.
type Probe struct {
	// From is the offset the read started at.
	From int64
	// Next is the offset after the last record or batch read: there is
	// no data record in [From, Next) unless Found.
	Next int64
	// Stable is the partition's last stable offset when it was read:
	// records at or after it belong to open transactions and were not
	// returned.
	Stable int64
	// Found is true when a data record at or after From was read; Offset
	// and Timestamp are that first record's. Timestamp is zero when the
	// record has none (NO_TIMESTAMP, -1): its age is unknown, not 56 years.
	Found     bool
	Offset    int64
	Timestamp time.Time
}

// Continue joins a probe read from p.Next onto p: since [p.From, p.Next)
// held no data record, the first data record at or after p.From is the
// first one the continuation found.
func (p Probe) Continue(next Probe) Probe {
	next.From = p.From
	return next
}

// Usable reports whether a probe read earlier still answers for a
// partition whose high watermark is now end. A found record stays the
// oldest unconsumed one for as long as the commit does not move (the cache
// is keyed by the offset). "No data up to Next" answers only while Next
// reaches end: records appended since may be data.
func (p Probe) Usable(end int64) bool {
	return p.Found || p.Next >= end
}

// Partition is the decided lag of one partition.
type Partition struct {
	// Messages and Seconds are valid when MessagesOK and SecondsOK.
	Messages   int64
	MessagesOK bool
	Seconds    float64
	SecondsOK  bool
}

// Decide returns the lag of a partition from its offsets and, if the group
// is behind, the probe read from Oldest(o). probe may be nil when it could
// not be read; then the time lag is unknown.
//
// The offset lag is always Messages(o), what kafka-consumer-groups
// --describe reports as LAG: transaction markers, aborted records and
// records retention deleted count, as they do for Kafka. Only the time lag
// reads records: it is the age of the first record the group's consumers
// still have to read. A partition whose only records after the commit are
// transaction markers or aborted records has a time lag of 0 (a
// read_committed consumer commits the offset after its last data record
// and stays short of the high watermark by the commit marker: the false
// alarm of Burrow #570 is kept out of the time lag, which is what pages).
//
// A partition whose remaining records all sit in an open transaction has
// nothing a read_committed consumer can read yet: its time lag is 0 too.
func Decide(o Offsets, probe *Probe, now time.Time) Partition {
	msgs, msgsOK := Messages(o)
	out := Partition{Messages: msgs, MessagesOK: msgsOK}
	if _, behind := Oldest(o); !behind {
		out.SecondsOK = true
		return out
	}
	switch {
	case probe == nil:
	case probe.Found && probe.Offset < o.End && probe.Timestamp.IsZero():
		// A record without a timestamp: the age is unknown.
	case probe.Found && probe.Offset < o.End:
		out.Seconds = max(now.Sub(probe.Timestamp).Seconds(), 0)
		out.SecondsOK = true
	case probe.Found || probe.Next >= o.End:
		// No data record below the high watermark: only markers or
		// aborted records.
		out.SecondsOK = true
	case probe.Next >= probe.Stable:
		out.SecondsOK = true
	}
	return out
}

// Lost is how many records retention (DeleteRecords, retention.ms or
// retention.bytes) deleted before the group consumed them: the log start
// minus the commit, when the commit is below it. The group resumes at the
// log start (its auto.offset.reset permitting) and never sees them. They
// are part of the offset lag (Messages counts from the commit, as Kafka
// does), never added to it again; the time lag does not see them.
func Lost(o Offsets) int64 {
	if !o.Committed() || !o.StartKnown {
		return 0
	}
	return max(o.Start-o.Commit, 0)
}

// Uncommitted is the rule for a partition a group never committed to.
type Uncommitted int

const (
	// IgnoreUncommitted counts only committed partitions, as kminion and
	// Burrow do: a new group with auto.offset.reset=latest has nothing
	// ahead of it, and counting from the log start would page with a lag
	// as old as the retention.
	IgnoreUncommitted Uncommitted = iota
	// FromLogStart counts a never-committed partition from its log start,
	// in records and seconds: for groups that start at the earliest
	// offset, where all that is retained is really unconsumed.
	FromLogStart
)

// Topic is the lag of one (group, topic).
type Topic struct {
	// Messages is the sum over the partitions whose lag is known.
	Messages   int64
	MessagesOK bool
	// Seconds is the largest time lag over the partitions whose time lag
	// is known.
	Seconds   float64
	SecondsOK bool
	// Partial is true when some partition's lag is unknown: the values
	// are lower bounds. Unknown counts those partitions.
	Partial bool
	Unknown int
}

// Sum folds the partitions of one topic.
func Sum(ps []Partition) Topic {
	var t Topic
	for _, p := range ps {
		if p.MessagesOK {
			t.Messages += p.Messages
			t.MessagesOK = true
		}
		if p.SecondsOK {
			t.Seconds = max(t.Seconds, p.Seconds)
			t.SecondsOK = true
		}
		if !p.MessagesOK || !p.SecondsOK {
			t.Partial = true
			t.Unknown++
		}
	}
	return t
}

// Group types as ListGroups reports them (KIP-848). A broker older than
// Kafka 3.8 reports no type; its groups are classic.
const (
	TypeClassic  = "classic"
	TypeConsumer = "consumer"
	TypeShare    = "share"
)

// Listed is a group as the cluster lists it.
type Listed struct {
	Name string
	// Type is "classic", "consumer", "share", "streams", or "" from
	// brokers before KIP-848.
	Type string
}

// Matcher matches a group or topic name.
type Matcher interface{ Match(string) bool }

// SelectGroups returns the listed groups that match any of patterns, sorted
// by name, with an empty Type read as classic. Share and streams groups
// are left out: share groups have no committed offsets, and streams groups
// need their own describe call. An empty pattern list selects nothing.
func SelectGroups(listed []Listed, patterns []Matcher) []Listed {
	var out []Listed
	for _, g := range listed {
		switch g.Type {
		case "":
			g.Type = TypeClassic
		case TypeClassic, TypeConsumer:
		default:
			continue
		}
		if matchAny(patterns, g.Name) {
			if out == nil {
				out = make([]Listed, 0, len(listed))
			}
			out = append(out, g)
		}
	}
	// Typed, not sort.Slice's reflected swaps: 1.5% of a steady scrape's
	// CPU at 10,000 groups, listed in the broker's map order.
	slices.SortFunc(out, func(a, b Listed) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// SelectShareGroups returns the listed share groups (KIP-932) that match
// any of patterns, sorted by name.
func SelectShareGroups(listed []Listed, patterns []Matcher) []Listed {
	var out []Listed
	for _, g := range listed {
		if g.Type == TypeShare && matchAny(patterns, g.Name) {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// matchAny reports whether any of patterns matches name.
func matchAny(patterns []Matcher, name string) bool {
	for _, p := range patterns {
		if p.Match(name) {
			return true
		}
	}
	return false
}

// Topics returns the topics a group has series for: those it committed
// to, those assigned to its members and those its members subscribe to,
// kept by filter (nil keeps all), sorted. Every partition of these topics
// is planned; whether one the group never committed to counts in the lag
// is the Uncommitted rule's call (by default it does not, and it shows in
// the uncommitted partitions count instead).
func Topics(committed, assigned, subscribed []string, filter func(string) bool) []string {
	// Sorted, then duplicates squeezed out: no map per group, which
	// was one allocation per group and scrape at 10,000 groups.
	out := make([]string, 0, len(committed)+len(assigned)+len(subscribed))
	for _, ts := range [...][]string{committed, assigned, subscribed} {
		for _, t := range ts {
			if filter == nil || filter(t) {
				out = append(out, t)
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// TopicFilter returns a filter that keeps a topic matching any of patterns;
// with no patterns it keeps every topic.
func TopicFilter(patterns []Matcher) func(string) bool {
	if len(patterns) == 0 {
		return nil
	}
	return func(t string) bool { return matchAny(patterns, t) }
}

// Unsupported returns the listed groups that match patterns but are of a
// type SelectGroups leaves out (share, streams, or one this version does
// not know), so the caller can say so instead of dropping them silently.
func Unsupported(listed []Listed, patterns []Matcher) []Listed {
	var out []Listed
	for _, g := range listed {
		switch g.Type {
		case "", TypeClassic, TypeConsumer:
			continue
		}
		if matchAny(patterns, g.Name) {
			out = append(out, g)
		}
	}
	return out
}
