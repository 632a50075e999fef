package kafka

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Planning and caching, apart from I/O: from what the cluster answered
// (groups, commits, metadata, start and end offsets) which partitions
// count, what their offsets are, and which first records must be read
// because no cached probe answers for them. Tested with responses in
// Kafka's own shapes (plan_test.go); Update does the I/O around it.

// probeKey identifies a cached probe: an interned topic and the isolation
// read with (topicIso), a partition, and the offset read from. It is 16
// bytes, so that the cache's map holds 24 a slot, not 32.
type probeKey struct {
	topicIso int32
	part     int32
	from     int64
}

// newProbeKey is the key of partition part of interned topic tid read
// from offset from, with read_uncommitted (ru: aborted and open
// transactions' records are data) or read_committed.
func newProbeKey(tid, part int32, from int64, ru bool) probeKey {
	iso := int32(0)
	if ru {
		iso = 1
	}
	return probeKey{topicIso: tid<<1 | iso, part: part, from: from}
}

// cachedProbe is a cache entry: a Probe kept in 56 bytes instead of 104
// (its From is the key's offset, its timestamp milliseconds, as records
// carry it); gen is the last collection that used it. key is where it is
// cached; dropped is set when it leaves the cache, so that a plan
// holding it from the last collection knows it is no longer the entry
// for its key (a guard: today a partition's last entry is always still
// cached, which TestPlanHintsAsFreshLookups checks).
type cachedProbe struct {
	key                      probeKey
	next, stable, offset, ms int64
	gen                      uint32
	found, stamped, dropped  bool
}

// set keeps pr, read from cp.key's offset.
func (cp *cachedProbe) set(pr Probe) {
	cp.next, cp.stable, cp.offset, cp.found = pr.Next, pr.Stable, pr.Offset, pr.Found
	cp.stamped = !pr.Timestamp.IsZero()
	cp.ms = 0
	if cp.stamped {
		cp.ms = pr.Timestamp.UnixMilli()
	}
}

// get is the cached Probe.
func (cp *cachedProbe) get() Probe {
	pr := Probe{From: cp.key.from, Next: cp.next, Stable: cp.stable, Found: cp.found, Offset: cp.offset}
	if cp.stamped {
		pr.Timestamp = time.UnixMilli(cp.ms)
	}
	return pr
}

// usable is Probe.Usable of the cached probe.
func (cp *cachedProbe) usable(end int64) bool { return cp.found || cp.next >= end }

// probeCache caches what was read at (topic, partition, offset), so a
// commit that did not move costs no Fetch. Only entries used by the last
// collection are kept. Topics are interned to small numbers so that a
// lookup hashes no string. The key's offset is where the oldest
// unconsumed record is searched from (Oldest): the commit, or the log
// start once retention passed the commit, so an entry never outlives the
// records it describes.
type probeCache struct {
	probes   probeTable
	topicIDs map[string]int32
	gen      uint32
	// last is the probe each partition of each (group, topic) had in
	// the last plan, tried before the map, since in the steady state it
	// is the same entry (a lookup per partition was about 5% of a
	// steady scrape's CPU at 1000 groups). Only these pointers are kept
	// between collections, 8 bytes a partition: the plan's partitions
	// themselves (56 bytes each) are made anew from one slab per
	// collection.
	last map[groupTopic]*hintSet
	// lastShares is the same for share groups' partitions, by index in
	// the group's answer for the topic.
	lastShares map[groupTopic]*hintSet
	// used is how many entries this collection used (marked with gen).
	used int
}

// use marks cp used by this collection.
func (c *probeCache) use(cp *cachedProbe) {
	if cp.gen != c.gen {
		cp.gen = c.gen
		c.used++
	}
}

// groupTopic names one (group, topic) of a plan.
type groupTopic struct{ group, topic string }

// hintSet is what one (group, topic) keeps between collections: the probe
// each of its partitions had, and its label set. It is updated in place,
// so that a steady collection makes no new map of them; gen is the last
// collection that used it.
type hintSet struct {
	probes []*cachedProbe
	series *labelSet
	gen    uint32
}

// hints returns gt's hint set for np partitions in m, marked used by
// collection gen; a (group, topic) met twice in one collection gets a
// set of its own, not kept.
func hints(m map[groupTopic]*hintSet, gt groupTopic, np int, gen uint32) *hintSet {
	hs := m[gt]
	switch {
	case hs == nil:
		hs = &hintSet{}
		m[gt] = hs
	case hs.gen == gen:
		return &hintSet{probes: make([]*cachedProbe, np), gen: gen}
	}
	hs.gen = gen
	if len(hs.probes) != np {
		hs.probes = make([]*cachedProbe, np)
	}
	return hs
}

// sweepHints drops the hint sets collection gen did not use.
func sweepHints(m map[groupTopic]*hintSet, gen uint32) {
	for gt, hs := range m {
		if hs.gen != gen {
			delete(m, gt)
		}
	}
}

func newProbeCache() *probeCache {
	return &probeCache{topicIDs: map[string]int32{}}
}

func (c *probeCache) topicID(t string) int32 {
	id, ok := c.topicIDs[t]
	if !ok {
		id = int32(len(c.topicIDs))
		c.topicIDs[t] = id
	}
	return id
}

// partPlan is one partition of one (group, topic).
// Its fields are ordered so that it packs into 64 bytes: a collection
// makes one per (group, partition), 240,000 at 10,000 groups.
type partPlan struct {
	o     Offsets
	probe *cachedProbe
	// lagMs and lagKind are probe's lag, taken when it was set.
	lagMs   int64
	part    int32
	lagKind uint8
	// ok: the offsets are known. ignored: never committed and not
	// counted (IgnoreUncommitted). noCommit: the group has no committed
	// offset on the partition (known whenever its high watermark is).
	ok, ignored, noCommit bool
	behind                bool
}

// topicPlan is one (group, topic) and its partitions.
type topicPlan struct {
	group *groupState
	topic string
	parts []partPlan
	hints *hintSet
}

// miss is a partition whose probe is not cached: read as wants[want],
// then cached under key (continuing cont when it is a continuation).
type miss struct {
	pp   *partPlan
	key  probeKey
	want int
	cont *cachedProbe
	hint **cachedProbe
}

// lagPlan is one collection's plan.
type lagPlan struct {
	topics []topicPlan
	wants  []Want
	misses []miss
	cold   bool
}

// groupTopics returns, per group, the topics it gets series for, and the
// sorted union of them.
func groupTopics(states []*groupState, filter func(string) bool) (map[string][]string, []string) {
	byGroup := make(map[string][]string, len(states))
	set := map[string]bool{}
	for _, g := range states {
		if g.gone || !g.commitsOK {
			continue
		}
		committed := make([]string, 0, len(g.commits))
		for t := range g.commits {
			committed = append(committed, t)
		}
		ts := Topics(committed, g.assigned, g.subscribed, filter)
		byGroup[g.name] = ts
		for _, t := range ts {
			set[t] = true
		}
	}
	all := make([]string, 0, len(set))
	for t := range set {
		all = append(all, t)
	}
	sort.Strings(all)
	return byGroup, all
}

// plan works out every (group, topic) partition's offsets and the probes
// to read. Errors of single partitions or topics go to partial.
func (c *probeCache) plan(states []*groupState, byGroup map[string][]string, v view, rule Uncommitted, partial *[]error) *lagPlan {
	c.gen, c.used = c.gen+1, 0
	p := &lagPlan{topics: make([]topicPlan, 0, len(states)), cold: c.probes.len() == 0}
	wantIdx := map[probeKey]int{}
	n := 0
	for _, g := range states {
		for _, t := range byGroup[g.name] {
			n += len(v.meta[t].Partitions)
		}
	}
	slab := make([]partPlan, n)
	if p.cold {
		// The first collection misses everywhere: size for it. The
		// cache itself is sized by fill, for the distinct offsets read
		// (groups share offsets: 48,000 of 240,000 at 10,000 groups).
		p.misses = make([]miss, 0, n)
		wantIdx = make(map[probeKey]int, n)
	}
	// Offsets by topic, indexed by partition, made once per topic: a
	// lookup per (group, partition) would hash the topic name each time.
	byTopic := map[string]*topicOffsets{}
	if c.last == nil {
		c.last = map[groupTopic]*hintSet{}
	}
	used := 0
	defer func() {
		if used != len(c.last) {
			sweepHints(c.last, c.gen)
		}
	}()
	for _, g := range states {
		for _, t := range byGroup[g.name] {
			td, ok := v.meta[t]
			if !ok || td.Err != nil {
				if ok && !errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
					*partial = append(*partial, fmt.Errorf("metadata of topic %s: %w", t, td.Err))
				}
				continue
			}
			to := byTopic[t]
			if to == nil {
				n := 0
				for part := range td.Partitions {
					n = max(n, int(part)+1)
				}
				to = newTopicOffsets(t, n, v, partial)
				byTopic[t] = to
			}
			np := len(to.ends)
			if len(slab) < np {
				// More partitions than the metadata counted (a
				// partition listed past the metadata's).
				slab = make([]partPlan, np)
			}
			parts := slab[:np:np]
			slab = slab[np:]
			hs := hints(c.last, groupTopic{g.name, t}, np, c.gen)
			used++
			p.topics = append(p.topics, topicPlan{group: g, topic: t, parts: parts, hints: hs})
			tid := c.topicID(t)
			commits := g.commits[t]
			for i := range parts {
				pp := &parts[i]
				pp.part = int32(i)
				if offsets(pp, g.name, t, to, commits, rule, partial) && pp.behind {
					c.planProbe(p, pp, tid, t, wantIdx, &hs.probes[i], g.readUncommitted)
				}
				hs.probes[i] = pp.probe
			}
		}
	}
	return p
}

// topicOffsets is one topic's listed offsets by partition; -1 is unknown
// (the error was reported once, for the topic's first use).
type topicOffsets struct {
	ends, starts []int64
}

func newTopicOffsets(t string, n int, v view, partial *[]error) *topicOffsets {
	to := &topicOffsets{ends: make([]int64, n), starts: make([]int64, n)}
	for i := range to.ends {
		to.ends[i], to.starts[i] = -1, -1
	}
	fill := func(what string, listed map[int32]kadm.ListedOffset, dst []int64) {
		for part, o := range listed {
			switch {
			case o.Err != nil:
				*partial = append(*partial, fmt.Errorf("list %s offset of %s/%d: %w", what, t, part, o.Err))
			case part >= 0 && int(part) < n && o.Offset >= 0:
				dst[part] = o.Offset
			}
		}
	}
	fill("end", v.ends[t], to.ends)
	fill("start", v.starts[t], to.starts)
	return to
}

// offsets fills pp's offsets from the topic's listed offsets and the
// group's commits on it. It returns false when they are not known (the
// error is in partial) or the partition does not count.
func offsets(pp *partPlan, group, t string, to *topicOffsets, commits []committed, rule Uncommitted, partial *[]error) bool {
	end := to.ends[pp.part]
	if end < 0 {
		return false
	}
	o := Offsets{Commit: NoCommit, End: end}
	if st := to.starts[pp.part]; st >= 0 {
		o.Start, o.StartKnown = st, true
	}
	if int(pp.part) < len(commits) && commits[pp.part].ok {
		cr := commits[pp.part]
		if err := cr.err(); err != nil {
			*partial = append(*partial, fmt.Errorf("committed offset of group %s on %s/%d: %w", group, t, pp.part, err))
			return false
		}
		o.Commit = max(cr.at, NoCommit)
	}
	pp.noCommit = !o.Committed()
	if !o.Committed() && rule == IgnoreUncommitted {
		pp.o, pp.ok, pp.ignored = o, true, true
		return false
	}
	if !o.Committed() && !o.StartKnown {
		return false
	}
	_, behind := Oldest(o)
	pp.o, pp.ok, pp.behind = o, true, behind
	return true
}

// planProbe takes pp's probe from the cache or adds it to the reads. hint
// holds the entry the partition had in the last plan, taken when it is
// still the cache's entry for the key; fill puts a probe read there.
func (c *probeCache) planProbe(p *lagPlan, pp *partPlan, tid int32, t string, wantIdx map[probeKey]int, hint **cachedProbe, ru bool) {
	from, _ := Oldest(pp.o)
	key := newProbeKey(tid, pp.part, from, ru)
	read := from
	cp := *hint
	if cp == nil || cp.dropped || cp.key != key {
		cp = c.probes.get(key)
	}
	switch {
	case cp != nil && cp.usable(pp.o.End):
		c.use(cp)
		pp.setProbe(cp)
		return
	case cp != nil:
		// Records were appended after a stretch of markers, or the
		// last read stopped short (bounded work): read on from where
		// it stopped.
		read = cp.next
	}
	wk := newProbeKey(tid, pp.part, read, ru)
	wi, ok := wantIdx[wk]
	if !ok {
		wi = len(p.wants)
		wantIdx[wk] = wi
		p.wants = append(p.wants, Want{Topic: t, Partition: pp.part, From: read, Uncommitted: ru})
	}
	p.misses = append(p.misses, miss{pp: pp, key: key, want: wi, cont: cp, hint: hint})
}

// hit is planProbe's fast path alone: the cached probe usable for a
// partition at offsets o (hint, its last probe, tried first), counted as
// used; nil when it must be read.
func (c *probeCache) hit(o Offsets, tid, part int32, hint *cachedProbe, ru bool) *cachedProbe {
	from, _ := Oldest(o)
	key := newProbeKey(tid, part, from, ru)
	cp := hint
	if cp == nil || cp.dropped || cp.key != key {
		cp = c.probes.get(key)
	}
	if cp == nil || !cp.usable(o.End) {
		return nil
	}
	c.use(cp)
	return cp
}

// fill caches what was read for p's misses.
func (c *probeCache) fill(p *lagPlan, probes []Probe, ok []bool) {
	// A cold cache takes its entries from one slab. Later misses are few
	// and allocated one by one, so that a long-lived entry does not keep
	// a whole later slab alive.
	var slab []cachedProbe
	if p.cold {
		// One entry per distinct offset read: in a cold collection,
		// every want is a distinct key.
		slab = make([]cachedProbe, len(p.wants))
		c.probes.reserve(len(p.wants))
	}
	for _, m := range p.misses {
		if !ok[m.want] {
			continue
		}
		pr := probes[m.want]
		if m.cont != nil {
			pr = m.cont.get().Continue(pr)
		}
		cp := c.probes.get(m.key)
		if cp == nil || cp == m.cont {
			if cp != nil {
				cp.dropped = true
			}
			if p.cold {
				// A cold plan's wants are its distinct keys.
				cp = &slab[m.want]
			} else {
				cp = new(cachedProbe)
			}
			cp.key = m.key
			c.probes.put(cp)
		}
		cp.set(pr)
		c.use(cp)
		m.pp.setProbe(cp)
		*m.hint = cp
	}
}

// sweep keeps only what this collection used: moved commits' entries go.
func (c *probeCache) sweep() {
	if c.used == c.probes.len() {
		// Every entry was used (the steady state): nothing to drop,
		// and no walk over every entry.
		return
	}
	c.probes.keep(func(cp *cachedProbe) bool {
		if cp.gen != c.gen {
			cp.dropped = true
			return false
		}
		return true
	})
	if c.probes.len() == 0 && len(c.topicIDs) > 0 {
		c.topicIDs = map[string]int32{}
	}
}

// reset drops everything (no group selected).
func (c *probeCache) reset() {
	c.probes.each(func(cp *cachedProbe) { cp.dropped = true })
	c.probes = probeTable{}
	c.last, c.lastShares = nil, nil
}
