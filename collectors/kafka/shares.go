package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// Share groups (KIP-932) have no committed offsets: each share-partition
// has a start offset (SPSO) below which every record is acknowledged (or
// archived), and the broker counts the records at or after it not yet
// acknowledged as the partition's lag (DescribeShareGroupOffsets v1, the
// LAG of kafka-share-groups --describe). On Apache Kafka the exporter
// reads the same state from the share coordinator's log and counts that
// lag as the broker does (sharelog.go); elsewhere it asks
// (shareoffsets.go). The time lag is the age of the
// first record at or after the SPSO the broker reports: every record
// below it is done, so the oldest unacknowledged record is at or after it
// and this age is never younger than the true one. It can be older: the
// broker moves the SPSO it reports lazily (Kafka 4.4.0 still reported 0
// after records 0-3 of 10 were accepted one by one), and records above it
// may be acknowledged out of order; which are, the broker does not say.
// It is the closest the broker's answers allow, an upper bound.
var (
	shareLagMessagesDesc = prometheus.NewDesc(
		vocab.ShareGroupLagMessages,
		"Records of the topic the share group has not acknowledged, as kafka-share-groups --describe counts its LAG (the broker's share-partition lag), summed over partitions.",
		[]string{vocab.LabelCluster, vocab.LabelGroup, vocab.LabelTopic}, nil)
	shareLagSecondsDesc = prometheus.NewDesc(
		vocab.ShareGroupLagSeconds,
		"Age of the first record at or after the share-partition start offset the broker reports, largest over the topic's partitions; 0 when the lag is 0. An upper bound of the age of the oldest record the share group has not acknowledged (the broker moves that offset lazily).",
		[]string{vocab.LabelCluster, vocab.LabelGroup, vocab.LabelTopic}, nil)
	shareMembersDesc = prometheus.NewDesc(
		vocab.ShareGroupMembers,
		"Members of the share group; 0 when nobody consumes.",
		[]string{vocab.LabelCluster, vocab.LabelGroup}, nil)
	shareInfoDesc = prometheus.NewDesc(
		vocab.ShareGroupInfo,
		"Constant 1: the share group's state as the broker reports it.",
		[]string{vocab.LabelCluster, vocab.LabelGroup, vocab.LabelState}, nil)
)

// sharePart is one share-partition: its start offset and the broker's lag
// (lagOK false when the broker did not give one), the offsets listed for
// it and the time lag of the record probed at the start offset, taken
// from the probe cache's entry as the consumer groups' plans take it
// (lagKind, lagMs: probelag.go). It holds no pointer and no time.Time:
// 240,000 of them are made each scrape at 10,000 groups, and a Probe in
// each made them twice as large and memory the garbage collector scans.
type sharePart struct {
	spso  int64
	lag   int64
	o     Offsets
	lagMs int64
	part  int32
	// done is, for a partition read from the share coordinator's log,
	// its delivery-complete count.
	done    int32
	lagKind uint8
	lagOK   bool
	oOK     bool
	probeOK bool
	// listed marks, while shareParts sorts them, the partitions the
	// broker answered for.
	listed bool
	// fromLog marks a partition read from the share coordinator's log:
	// its lag is worked out from done once the high watermark is listed.
	fromLog bool
}

// setProbe takes cp's time lag for sp, whose offsets are set.
func (sp *sharePart) setProbe(cp *cachedProbe) {
	sp.lagKind, sp.lagMs = cp.lag(sp.o.End)
	sp.probeOK = true
}

// shareState is what one collection learned of one share group.
type shareState struct {
	name, state     string
	members         int
	membersOK       bool
	readUncommitted bool
	topics          map[string][]sharePart
	gone            bool
	// order is topics' names sorted, and hs each one's hint set, the
	// probes and the label set it had in the last collection: set by
	// sharesBehind, carved from one slice for all groups.
	order []string
	hs    []*hintSet
}

// describeShares describes the selected share groups and their
// share-partition offsets, in chunks (askShares). A group left without an
// answer in time has no lag series this collection, and the collection
// is partial: its last value is never passed off as a current one.
func (c *Collector) describeShares(ctx context.Context, selected []Listed, partial *[]error) []*shareState {
	if len(selected) == 0 {
		return nil
	}
	names := make([]string, len(selected))
	for i, g := range selected {
		names[i] = g.Name
	}
	fromLog := c.readShareLog(ctx)
	var a shareAnswers
	var logTopics map[string]map[string][]sharePart
	if fromLog {
		a = c.askShareDescribes(ctx, names)
		logTopics = c.shareLogTopics(ctx, names)
	} else {
		a = c.askShares(ctx, names)
	}
	if a.missed > 0 {
		c.logger.Warn("kafka share groups not answered within the scrape's time: their lag is not exported this scrape",
			"cluster", c.cluster, "groups", a.missed, "of", len(names), "err", a.err)
		*partial = append(*partial, fmt.Errorf("share groups: %d of %d not answered: %w", a.missed, len(names), a.err))
	}
	*partial = append(*partial, a.errs...)
	out := make([]*shareState, 0, len(names))
	for _, name := range names {
		s := &shareState{name: name, readUncommitted: c.shareReadUncommitted(name)}
		out = append(out, s)
		if d, ok := a.desc[name]; ok {
			switch {
			case errors.Is(d.Err, kerr.GroupIDNotFound) || d.GroupState == "Dead":
				s.gone = true
			case d.Err != nil:
				*partial = append(*partial, fmt.Errorf("describe share group %s: %w", name, d.Err))
			default:
				s.state, s.members, s.membersOK = d.GroupState, len(d.Members), true
			}
		}
		if rg, ok := a.offs[name]; ok && !s.gone {
			s.topics = shareParts(rg, c.topics, partial)
		}
		if fromLog && !s.gone {
			s.topics = logTopics[name]
		}
	}
	return out
}

// shareReadUncommitted is a share group's isolation: its isolations entry,
// else kafka.NAME.isolation when set, else read_uncommitted, the default
// of Kafka's share.isolation.level (unlike a consumer's).
func (c *Collector) shareReadUncommitted(group string) bool {
	if _, ok := c.cfg.Isolations[group]; ok || c.cfg.Isolation != "" {
		return c.cfg.ReadUncommitted(group)
	}
	return true
}

// shareTopics is the sorted union of the share groups' topics.
func shareTopics(ss []*shareState) []string {
	set := map[string]bool{}
	for _, s := range ss {
		for t := range s.topics {
			set[t] = true
		}
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// mergeTopics returns the sorted union of two sorted topic lists.
func mergeTopics(a, b []string) []string {
	if len(b) == 0 {
		return a
	}
	seen := make(map[string]bool, len(a)+len(b))
	var out []string
	for _, t := range append(append([]string(nil), a...), b...) {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}

// readShareProbes fills each share-partition's offsets from v and takes
// the first record at its start offset where the group is behind: from
// the probe cache the consumer groups use (an unmoved start offset costs
// no Fetch, as an unmoved commit does not), else read, once per distinct
// offset, and cached.
func (c *Collector) readShareProbes(ctx context.Context, ss []*shareState, v view, partial *[]error) {
	at := c.sharesBehind(ss, v)
	if len(at) == 0 {
		return
	}
	p := &lagPlan{}
	wantIdx := map[probeKey]int{}
	plans := make([]partPlan, len(at))
	tid, lastTopic := int32(0), ""
	for i, b := range at {
		pp := &plans[i]
		*pp = partPlan{part: b.sp.part, o: b.sp.o, ok: true, behind: true}
		if i == 0 || b.topic != lastTopic {
			tid, lastTopic = c.cache.topicID(b.topic), b.topic
		}
		c.cache.planProbe(p, pp, tid, b.topic, wantIdx, b.hint, b.ru)
		*b.hint = pp.probe
	}
	if len(p.wants) > 0 {
		probes, ok, err := c.prober.Read(ctx, v.meta, p.wants)
		if err != nil {
			*partial = append(*partial, fmt.Errorf("share groups: %w", err))
		}
		c.cache.fill(p, probes, ok)
	}
	for i, b := range at {
		if cp := plans[i].probe; cp != nil {
			b.sp.setProbe(cp)
		}
	}
}

// behindPart is a share-partition whose group is behind: its probe is
// needed; hint holds the probe it had in the last collection.
type behindPart struct {
	sp    *sharePart
	topic string
	ru    bool
	hint  **cachedProbe
}

// sharesBehind fills each share-partition's offsets from v, and the
// probe of each whose group is behind from the probe cache where it
// holds it; it returns the others, to be read. (Returning every
// partition behind, with a plan for each, made 20 MB of garbage a
// steady scrape at 10,000 share groups, where every probe was cached.)
func (c *Collector) sharesBehind(ss []*shareState, v view) []behindPart {
	var at []behindPart
	// Each share-partition's last probe is tried before the cache's map,
	// as for consumer groups (plan).
	if c.cache.lastShares == nil {
		c.cache.lastShares = map[groupTopic]*hintSet{}
	}
	used := 0
	defer func() {
		if used != len(c.cache.lastShares) {
			sweepHints(c.cache.lastShares, c.cache.gen)
		}
	}()
	n := 0
	for _, s := range ss {
		n += len(s.topics)
	}
	order, hss := make([]string, 0, n), make([]*hintSet, 0, n)
	for _, s := range ss {
		from := len(order)
		for t := range s.topics {
			order = append(order, t)
		}
		s.order = order[from:len(order):len(order)]
		if len(s.order) > 1 {
			sort.Strings(s.order)
		}
		for _, t := range s.order {
			parts := s.topics[t]
			hs := hints(c.cache.lastShares, groupTopic{s.name, t}, len(parts), c.cache.gen)
			hss = append(hss, hs)
			used++
			tid := c.cache.topicID(t)
			ends, starts := v.ends[t], v.starts[t]
			for i := range parts {
				hint := hs.probes[i]
				hs.probes[i] = nil
				sp := &parts[i]
				end, ok := ends[sp.part]
				if sp.fromLog && ok && end.Err == nil {
					sp.lag, sp.lagOK = shareLag(shareEntry{start: sp.spso, done: sp.done}, end.Offset)
				}
				if !ok || end.Err != nil || !sp.lagOK {
					continue
				}
				sp.o = Offsets{Commit: sp.spso, End: end.Offset}
				if st, ok := starts[sp.part]; ok && st.Err == nil {
					sp.o.Start, sp.o.StartKnown = st.Offset, true
				}
				sp.oOK = true
				if _, behind := Oldest(sp.o); !behind || sp.lag <= 0 {
					continue
				}
				if cp := c.cache.hit(sp.o, tid, sp.part, hint, s.readUncommitted); cp != nil {
					hs.probes[i] = cp
					sp.setProbe(cp)
					continue
				}
				hs.probes[i] = hint
				at = append(at, behindPart{sp, t, s.readUncommitted, &hs.probes[i]})
			}
		}
		s.hs = hss[from:len(hss):len(hss)]
	}
	return at
}

// emitShares sends the share groups' series. The (group, topic)s whose
// lag is a lower bound make one error, not one each: when the end offsets
// fail, that is every share group.
func (c *Collector) emitShares(ch chan<- prometheus.Metric, ss []*shareState, now time.Time, partial *[]error) {
	var low lowerBounds
	defer low.report(partial)
	var buf []Partition
	for _, s := range ss {
		if s.gone {
			continue
		}
		gs := c.series.group(s.name)
		ls := gs.deadline
		if !c.series.hinted(ls) {
			ls = c.series.labels(partial, kafkaDeadlineDesc, c.cluster, s.name)
			gs.deadline = ls
		}
		ls.send(ch, 0, kafkaDeadlineDesc, c.cfg.DeadlineFor(s.name).Seconds())
		if s.membersOK {
			// The members share the deadline's label set.
			ls.send(ch, 1, shareMembersDesc, float64(s.members))
			info := gs.info
			if gs.state != s.state || gs.typ != shareType || !c.series.hinted(info) {
				info = c.series.labels(partial, shareInfoDesc, c.cluster, s.name, s.state)
				gs.info, gs.state, gs.typ = info, s.state, shareType
			}
			info.send(ch, 0, shareInfoDesc, 1)
		}
		for i, t := range s.order {
			var sum Topic
			sum, buf = shareSum(s.topics[t], now, buf)
			hs := s.hs[i]
			ls := hs.series
			if !c.series.hinted(ls) {
				ls = c.series.labels(partial, shareLagMessagesDesc, c.cluster, s.name, t)
				hs.series = ls
			}
			if sum.MessagesOK {
				ls.send(ch, 0, shareLagMessagesDesc, float64(sum.Messages))
			}
			if sum.SecondsOK {
				ls.send(ch, 1, shareLagSecondsDesc, sum.Seconds)
			}
			if sum.Partial {
				low.add(s.name, t, sum.Unknown, len(s.topics[t]))
			}
		}
	}
}

// shareType marks a groupSets' info as a share group's (shareInfoDesc),
// never one of the group types a consumer group's info names.
const shareType = "\x00share"

// lowerBounds counts the share groups' topics whose lag is a lower bound.
type lowerBounds struct {
	n, unknown, parts int
	first             string
}

func (l *lowerBounds) add(group, topic string, unknown, parts int) {
	if l.n == 0 {
		l.first = fmt.Sprintf("share group %s on %s", group, topic)
	}
	l.n++
	l.unknown += unknown
	l.parts += parts
}

func (l *lowerBounds) report(partial *[]error) {
	switch l.n {
	case 0:
	case 1:
		*partial = append(*partial, fmt.Errorf("lag of %s is a lower bound: %d of %d partitions unknown", l.first, l.unknown, l.parts))
	default:
		*partial = append(*partial, fmt.Errorf("lag of %d share groups' topics is a lower bound: %d of %d partitions unknown (the first: %s)", l.n, l.unknown, l.parts, l.first))
	}
}

// shareSum decides each share-partition and folds them: messages from the
// broker's lag, seconds from the record at the start offset (its cached
// probe's lag, as decideCached finishes a consumer group's partition).
// The partitions are decided into buf, returned for the next topic.
func shareSum(parts []sharePart, now time.Time, buf []Partition) (Topic, []Partition) {
	ds := buf[:0]
	for i := range parts {
		sp := &parts[i]
		d := Partition{Messages: sp.lag, MessagesOK: sp.lagOK}
		switch {
		case !sp.oOK:
		case sp.lag == 0:
			d.SecondsOK = true
		case !behind(sp.o):
			// Lag counted but nothing left below the high watermark
			// (the offsets moved between the two answers): caught up.
			d.SecondsOK = true
		case sp.probeOK:
			dec := decideCached(sp.o, sp.lagKind, sp.lagMs, now)
			d.Seconds, d.SecondsOK = dec.Seconds, dec.SecondsOK
		}
		ds = append(ds, d)
	}
	return Sum(ds), ds
}

func behind(o Offsets) bool { _, b := Oldest(o); return b }
