package kafka

import (
	"fmt"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// seriesKey names one series: its descriptor and up to four label values
// in the descriptor's order.
type seriesKey struct {
	desc   *prometheus.Desc
	values [4]string
}

// cachedSeries is one series' label pairs, built and checked once, and
// the last gauge sent for it.
type cachedSeries struct {
	labels []*dto.LabelPair
	last   *gauge
	gen    uint64
}

// seriesCache keeps every series of the last collection, so that a
// scrape where a series' value did not move sends the same gauge again
// and one where it moved allocates one gauge: building a const metric
// (label pairs, a name and value pointer per label, the dto) for each of
// 6 series per group on every scrape was a tenth of a steady scrape's
// CPU. Entries not sent by a collection go at its end. Only Update uses
// it (under the collector's semaphore); a gauge, once sent, never
// changes, since an earlier scrape may still be encoding it.
type seriesCache struct {
	entries map[seriesKey]*cachedSeries
	gen     uint64
	used    int
}

func newSeriesCache() *seriesCache {
	return &seriesCache{entries: map[seriesKey]*cachedSeries{}}
}

// gauge is a constant gauge with shared, immutable label pairs.
type gauge struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	value  float64
	g      dto.Gauge
}

func (g *gauge) Desc() *prometheus.Desc { return g.desc }

func (g *gauge) Write(out *dto.Metric) error {
	out.Label = g.labels
	out.Gauge = &g.g
	return nil
}

// begin starts a collection.
func (c *seriesCache) begin() { c.gen++; c.used = 0 }

// end drops the series this collection did not send.
func (c *seriesCache) end() {
	if c.used == len(c.entries) {
		return
	}
	for k, s := range c.entries {
		if s.gen != c.gen {
			delete(c.entries, k)
		}
	}
}

// send sends one gauge of desc (whose variable labels are values, at most
// four). A label value that is not valid UTF-8 (a group name, say) cannot
// be exported: that series is left out and reported, instead of a panic
// taking the exporter down.
func (c *seriesCache) send(ch chan<- prometheus.Metric, partial *[]error, desc *prometheus.Desc, v float64, values ...string) {
	k := seriesKey{desc: desc}
	copy(k.values[:], values)
	s := c.entries[k]
	if s == nil {
		for _, lv := range values {
			if !utf8.ValidString(lv) {
				*partial = append(*partial, invalidLabel(values, lv))
				return
			}
		}
		s = &cachedSeries{labels: prometheus.MakeLabelPairs(desc, values)}
		c.entries[k] = s
	}
	if s.gen != c.gen {
		s.gen = c.gen
		c.used++
	}
	// Equal values, NaN aside, reuse the gauge sent last time.
	if s.last == nil || s.last.value != v {
		g := &gauge{desc: desc, labels: s.labels, value: v}
		g.g.Value = &g.value
		s.last = g
	}
	ch <- s.last
}

// invalidLabel reports a label value that is not UTF-8. It copies values
// so that send's variadic slice stays on the stack.
func invalidLabel(values []string, bad string) error {
	return fmt.Errorf("series %q: label value %q is not valid UTF-8", append([]string(nil), values...), bad)
}
