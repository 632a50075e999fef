package kafka

import (
	"fmt"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// labelKey names one label set: the descriptor that made it (metrics
// sharing label names share one set, made by the first of them) and up to
// four label values in the descriptor's order.
type labelKey struct {
	kind   *prometheus.Desc
	values [4]string
}

// labelSet is one label set's label pairs, built and checked once, and
// the last gauge sent by each metric (slot) on it.
type labelSet struct {
	labels []*dto.LabelPair
	last   [4]*gauge
	gen    uint32
	// dropped: the set left the cache; a caller keeping it as a hint
	// must look it up again.
	dropped bool
}

// seriesCache keeps every label set of the last collection, so that a
// scrape where a series' value did not move sends the same gauge again
// and one where it moved allocates one gauge: building a const metric
// (label pairs, a name and value pointer per label, the dto) for each of
// 6 series per group on every scrape was 8% of a steady scrape's CPU
// at 1000 groups. The series of one label set are found with one lookup. Entries
// not used by a collection go at its end. Only Update uses it (under the
// collector's semaphore); a gauge, once sent, never changes, since an
// earlier scrape may still be encoding it.
type seriesCache struct {
	entries map[labelKey]*labelSet
	gen     uint32
	used    int
	// pairs holds one label pair per (name, value) in use, shared by
	// every label set holding it: a group's sets share its group pair,
	// and all sets share the cluster's and each topic's. A pair (and its
	// two strings) in every set was 700 bytes of the ~2 KB a group's
	// series kept between collections. Pairs are immutable once made.
	pairs map[pairKey]*dto.LabelPair
	// groups holds each consumer group's own sets, found by its name.
	groups     map[string]*groupSets
	groupsUsed int
}

// groupSets is a consumer group's own label sets (its deadline and members,
// its info), found with one lookup of its name rather than one of a
// label-set key each: hashing and comparing those keys twice per group was
// 4% of a steady scrape's CPU at 10,000 groups. The sets stay in entries;
// state and typ are the info set's values.
type groupSets struct {
	deadline, info *labelSet
	state, typ     string
	gen            uint32
}

// pairKey names one label pair.
type pairKey struct{ name, value string }

func newSeriesCache() *seriesCache {
	return &seriesCache{entries: map[labelKey]*labelSet{}, pairs: map[pairKey]*dto.LabelPair{}, groups: map[string]*groupSets{}}
}

// gauge is a constant gauge with the shared, immutable label pairs of
// its set. It is 72 bytes (the 80-byte size class): a copy of the set's
// label slice in each of the 7 gauges a group keeps made it 96.
type gauge struct {
	desc  *prometheus.Desc
	set   *labelSet
	value float64
	g     dto.Gauge
}

func (g *gauge) Desc() *prometheus.Desc { return g.desc }

func (g *gauge) Write(out *dto.Metric) error {
	out.Label = g.set.labels
	out.Gauge = &g.g
	return nil
}

// begin starts a collection.
func (c *seriesCache) begin() { c.gen++; c.used, c.groupsUsed = 0, 0 }

// group returns the sets of the consumer group name, marked used by this
// collection; their fields are the caller's to fill.
func (c *seriesCache) group(name string) *groupSets {
	gs := c.groups[name]
	if gs == nil {
		gs = &groupSets{}
		c.groups[name] = gs
	}
	if gs.gen != c.gen {
		gs.gen = c.gen
		c.groupsUsed++
	}
	return gs
}

// end drops the label sets this collection did not use, and the pairs
// only they held.
func (c *seriesCache) end() {
	if c.groupsUsed != len(c.groups) {
		for name, gs := range c.groups {
			if gs.gen != c.gen {
				delete(c.groups, name)
			}
		}
	}
	if c.used == len(c.entries) {
		return
	}
	for k, s := range c.entries {
		if s.gen != c.gen {
			s.dropped = true
			delete(c.entries, k)
		}
	}
	pairs := make(map[pairKey]*dto.LabelPair, len(c.pairs))
	for _, s := range c.entries {
		for _, lp := range s.labels {
			pairs[pairKey{lp.GetName(), lp.GetValue()}] = lp
		}
	}
	c.pairs = pairs
}

// labels returns the label set of kind's label names with values (at
// most four). A label value that is not valid UTF-8 (a group name, say)
// cannot be exported: it is reported and the set is nil, whose series
// are left out, instead of a panic taking the exporter down.
func (c *seriesCache) labels(partial *[]error, kind *prometheus.Desc, values ...string) *labelSet {
	k := labelKey{kind: kind}
	copy(k.values[:], values)
	s := c.entries[k]
	if s == nil {
		for _, lv := range values {
			if !utf8.ValidString(lv) {
				*partial = append(*partial, invalidLabel(values, lv))
				return nil
			}
		}
		s = &labelSet{labels: c.share(prometheus.MakeLabelPairs(kind, values))}
		c.entries[k] = s
	}
	if s.gen != c.gen {
		s.gen = c.gen
		c.used++
	}
	return s
}

// hinted marks s, a set kept by the caller from an earlier collection,
// used by this one; it reports false when s is nil or left the cache.
func (c *seriesCache) hinted(s *labelSet) bool {
	if s == nil || s.dropped {
		return false
	}
	if s.gen != c.gen {
		s.gen = c.gen
		c.used++
	}
	return true
}

// share replaces each of a new set's pairs by the same pair already held
// by another set, and keeps the others, remade compact, for the sets to
// come.
func (c *seriesCache) share(lps []*dto.LabelPair) []*dto.LabelPair {
	for i, lp := range lps {
		k := pairKey{lp.GetName(), lp.GetValue()}
		if held, ok := c.pairs[k]; ok {
			lps[i] = held
		} else {
			lps[i] = newPair(k)
			c.pairs[k] = lps[i]
		}
	}
	return lps
}

// pair is a label pair and the two strings it points to, in one
// allocation: MakeLabelPairs allocates the three apart, and every scrape
// reads each series' pairs three times (the registry's checks, the
// encoder's escaping check, the text), each read of a scattered pair a
// cache miss or three at 10,000 groups. The same 96 bytes as before.
type pair struct {
	lp          dto.LabelPair
	name, value string
}

func newPair(k pairKey) *dto.LabelPair {
	p := &pair{name: k.name, value: k.value}
	p.lp.Name, p.lp.Value = &p.name, &p.value
	return &p.lp
}

// send sends desc's gauge on s (nil: nothing), slot naming desc among the
// metrics of the set. An unmoved value (NaN aside) reuses the gauge sent
// last time.
func (s *labelSet) send(ch chan<- prometheus.Metric, slot int, desc *prometheus.Desc, v float64) {
	if s == nil {
		return
	}
	last := s.last[slot]
	if last == nil || last.desc != desc || last.value != v {
		last = &gauge{desc: desc, set: s, value: v}
		last.g.Value = &last.value
		s.last[slot] = last
	}
	ch <- last
}

// send sends one gauge of desc on its own label set.
func (c *seriesCache) send(ch chan<- prometheus.Metric, partial *[]error, desc *prometheus.Desc, v float64, values ...string) {
	c.labels(partial, desc, values...).send(ch, 0, desc, v)
}

// invalidLabel reports a label value that is not UTF-8. It copies values
// so that the callers' variadic slices stay on the stack.
func invalidLabel(values []string, bad string) error {
	return fmt.Errorf("series %q: label value %q is not valid UTF-8", append([]string(nil), values...), bad)
}
