package outbox

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// compare checks the collector's sample against the oracle's.
func (o *oracle) compare(t *testing.T, k int, got sampleMetrics, want *oSample, rows []oRow, s *Sampler) {
	c := o.g.o
	capped := want.unpublished > float64(c.MaxCount) || want.dead > float64(c.MaxCount) || want.unclassified > float64(c.MaxCount)
	stateCapped := want.unpublished > float64(c.MaxCount)
	lab := func(f []string, extra ...string) map[string]string {
		m := map[string]string{"outbox": "ob"}
		for i, l := range c.Labels {
			m[l.Name] = f[i]
		}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	errorf := func(format string, args ...any) {
		t.Errorf("step %d: "+format, append([]any{k}, args...)...)
	}
	capKey := seriesKey("outbox_events_capped", map[string]string{"outbox": "ob"})
	if v, ok := got[capKey]; !ok || (v == 1) != capped {
		errorf("outbox_events_capped = %v (present %v), want capped=%v (unpublished %v, dead %v, unclassified %v, max_count %d)",
			v, ok, capped, want.unpublished, want.dead, want.unclassified, c.MaxCount)
	}
	// Every series the oracle sees must be exported; every exported
	// series must agree with the oracle (0 where it sees no row).
	seen := map[string]bool{}
	for key, f := range want.labels {
		seen[key] = true
		o.compareSeries(errorf, got, f, want.series[key], lab, stateCapped, capped, want)
	}
	for gk := range got {
		if !strings.HasPrefix(gk, "outbox_deadline_seconds{") {
			continue
		}
		f := o.labelsOf(gk)
		if seen[joinLabels(f)] {
			continue
		}
		o.compareSeries(errorf, got, f, &oSeries{events: map[string]float64{}, deadline: deadlineOf(c, f)}, lab, stateCapped, capped, want)
	}
	o.compareFold(errorf, got, rows, s)
	o.compareCounters(errorf, got, lab)
}

func deadlineOf(c *config.Outbox, f []string) float64 {
	if len(f) == 0 {
		return c.Deadline.Seconds()
	}
	return c.DeadlineFor(f[0]).Seconds()
}

// labelsOf reads the label values of the outbox's label columns from a
// series key.
func (o *oracle) labelsOf(key string) []string {
	m := map[string]string{}
	for _, p := range labelPairRe.FindAllStringSubmatch(key, -1) {
		v, err := strconv.Unquote(`"` + p[2] + `"`)
		if err != nil {
			v = p[2]
		}
		m[p[1]] = v
	}
	out := []string{}
	for _, l := range o.g.o.Labels {
		out = append(out, m[l.Name])
	}
	return out
}

func (o *oracle) compareSeries(errorf func(string, ...any), got sampleMetrics, f []string, w *oSeries,
	lab func([]string, ...string) map[string]string, stateCapped, capped bool, all *oSample) {
	c := o.g.o
	g := func(name string, extra ...string) (float64, bool) {
		v, ok := got[seriesKey(name, lab(f, extra...))]
		return v, ok
	}
	exact := func(name string, want float64, extra ...string) {
		v, ok := g(name, extra...)
		if !ok || math.Abs(v-want) > ageTolerance {
			errorf("%s%v = %v (present %v), want %v", name, lab(f, extra...), v, ok, want)
		}
	}
	// bounded: a lower bound while capped, never 0 where a row exists,
	// NULL label values included (README, Cost).
	bounded := func(name string, want float64, nonZero bool, extra ...string) {
		v, ok := g(name, extra...)
		switch {
		case !ok:
			errorf("%s%v missing, want <= %v", name, lab(f, extra...), want)
		case v > want:
			errorf("%s%v = %v, above the true %v", name, lab(f, extra...), v, want)
		case nonZero && want > 0 && v == 0:
			errorf("%s%v = 0 while capped, but %v rows exist", name, lab(f, extra...), want)
		}
	}
	exact("outbox_deadline_seconds", w.deadline)
	claimedExact := all.claimed <= float64(c.MaxCount)
	for _, st := range []string{oPending, oInFlight, oExpired} {
		switch {
		case !stateCapped:
			exact("outbox_events", w.events[st], "state", st)
		case st != oPending && claimedExact:
			exact("outbox_events", w.events[st], "state", st)
		default:
			bounded("outbox_events", w.events[st], true, "state", st)
		}
	}
	if all.dead <= float64(c.MaxCount) {
		exact("outbox_events", w.events[oDead], "state", oDead)
	} else {
		bounded("outbox_events", w.events[oDead], true, "state", oDead)
	}
	exact("outbox_oldest_pending_age_seconds", w.oldest)
	if !stateCapped {
		exact("outbox_past_deadline_events", w.past)
		exact("outbox_retried_events", w.retried)
		exact("outbox_unknown_result_events", w.unknown)
	} else {
		bounded("outbox_past_deadline_events", w.past, true)
		bounded("outbox_retried_events", w.retried, false)
		if claimedExact && all.unknownUnclaimed <= float64(c.MaxCount) {
			exact("outbox_unknown_result_events", w.unknown)
		} else {
			bounded("outbox_unknown_result_events", w.unknown, true)
		}
	}
	if c.Style() == config.StyleStatus {
		if all.unclassified <= float64(c.MaxCount) {
			exact("outbox_unclassified_events", w.unclassified)
		} else {
			bounded("outbox_unclassified_events", w.unclassified, true)
		}
	}
	_ = capped
}

// compareFold checks the collector's promises about folding: values with
// a deadline override keep their own series, and the series of an outbox
// are bounded.
func (o *oracle) compareFold(errorf func(string, ...any), got sampleMetrics, rows []oRow, s *Sampler) {
	c := o.g.o
	if len(c.Labels) == 0 {
		return
	}
	n := 0
	for k := range got {
		if strings.HasPrefix(k, "outbox_deadline_seconds{") {
			n++
		}
	}
	if bound := c.MaxLabelValues + len(c.Deadlines) + 1; n > bound {
		errorf("%d series, above the bound %d (max_label_values %d + %d overrides + other)", n, bound, c.MaxLabelValues, len(c.Deadlines))
	}
	for _, x := range rows {
		if _, ok := c.Deadlines[x.labels[0]]; ok {
			if f := s.Fold(x.labels); f[0] != x.labels[0] {
				errorf("%q has a deadline override but folds into %v", x.labels[0], f)
			}
		}
	}
}

func (o *oracle) compareCounters(errorf func(string, ...any), got sampleMetrics, lab func([]string, ...string) map[string]string) {
	c := o.g.o
	if c.PublishedAt != "" {
		for gk, v := range got {
			for _, m := range []struct {
				name string
				want map[string]float64
			}{{"outbox_published_events_total", o.published}, {"outbox_published_late_events_total", o.late}} {
				if !strings.HasPrefix(gk, m.name+"{") {
					continue
				}
				if w := m.want[joinLabels(o.labelsOf(gk))]; v != w {
					errorf("%s = %v, want %v", gk, v, w)
				}
			}
		}
		for key, w := range o.published {
			if w == 0 {
				continue
			}
			f := strings.Split(key, "\xff")
			if len(c.Labels) == 0 {
				f = nil
			}
			if _, ok := got[seriesKey("outbox_published_events_total", lab(f))]; !ok {
				errorf("outbox_published_events_total%v missing, want %v", lab(f), w)
			}
		}
		hl := map[string]string{"outbox": "ob"}
		if v := got[seriesKey("outbox_publish_latency_seconds_count", hl)]; v != o.latCount {
			errorf("latency count %v, want %v", v, o.latCount)
		}
		if v := got[seriesKey("outbox_publish_latency_seconds_sum", hl)]; math.Abs(v-o.latSum) > 1e-3*(1+o.latCount) {
			errorf("latency sum %v, want %v", v, o.latSum)
		}
		for i, b := range LatencyBuckets {
			bl := map[string]string{"outbox": "ob", "le": fmt.Sprint(b)}
			if v := got[seriesKey("outbox_publish_latency_seconds_bucket", bl)]; v != o.buckets[i] {
				errorf("latency bucket le=%v: %v, want %v", b, v, o.buckets[i])
			}
		}
	}
	if c.LeaseUntil != "" || c.ClaimedAt != "" && c.LeaseTTL > 0 {
		v := got[seriesKey("outbox_lease_expirations_total", map[string]string{"outbox": "ob"})]
		if v < o.leasesLow || v > o.leasesHigh {
			errorf("outbox_lease_expirations_total = %v, want between %v and %v", v, o.leasesLow, o.leasesHigh)
		}
	}
}

func sortedKeys(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
