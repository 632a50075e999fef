package web

import (
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
	"github.com/outbox-exporter/outbox_exporter/web/history"
)

// Sample is one gauge or counter value of the last collection.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Snapshot is the last collection, by metric name. The page reads it, so
// showing the page never sends a query of its own to a monitored database.
type Snapshot struct {
	At      time.Time
	Metrics map[string][]Sample
}

// Get returns the samples of name whose labels include match.
func (s *Snapshot) Get(name string, match map[string]string) []Sample {
	var out []Sample
	for _, smp := range s.Metrics[name] {
		ok := true
		for k, v := range match {
			if smp.Labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, smp)
		}
	}
	return out
}

// Max returns the largest value of name among samples matching match, and
// whether there was any.
func (s *Snapshot) Max(name string, match map[string]string) (float64, bool) {
	var best float64
	found := false
	for _, smp := range s.Get(name, match) {
		if !found || smp.Value > best {
			best, found = smp.Value, true
		}
	}
	return best, found
}

// MaxBy returns the largest value of name per distinct value of the labels
// keys (one or two), in one pass over its samples. A missing label is "".
func (s *Snapshot) MaxBy(name string, keys ...string) map[[2]string]float64 {
	out := map[[2]string]float64{}
	for _, smp := range s.Metrics[name] {
		var k [2]string
		for i, key := range keys[:min(len(keys), 2)] {
			k[i] = smp.Labels[key]
		}
		if v, ok := out[k]; !ok || smp.Value > v {
			out[k] = smp.Value
		}
	}
	return out
}

// SumBy is MaxBy's sum.
func (s *Snapshot) SumBy(name string, keys ...string) map[[2]string]float64 {
	out := map[[2]string]float64{}
	for _, smp := range s.Metrics[name] {
		var k [2]string
		for i, key := range keys[:min(len(keys), 2)] {
			k[i] = smp.Labels[key]
		}
		out[k] += smp.Value
	}
	return out
}

// Sum adds the values of name among samples matching match.
func (s *Snapshot) Sum(name string, match map[string]string) float64 {
	var sum float64
	for _, smp := range s.Get(name, match) {
		sum += smp.Value
	}
	return sum
}

// Values returns the distinct values of label among samples of name, sorted.
func (s *Snapshot) Values(name, label string) []string {
	seen := map[string]bool{}
	for _, smp := range s.Metrics[name] {
		if v, ok := smp.Labels[label]; ok {
			seen[v] = true
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

func newSnapshot(at time.Time, mfs []*dto.MetricFamily) *Snapshot {
	s := &Snapshot{At: at, Metrics: map[string][]Sample{}}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "outbox_") {
			continue
		}
		for _, m := range mf.Metric {
			v, ok := sampleValue(m)
			if !ok {
				continue
			}
			labels := make(map[string]string, len(m.Label))
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			s.Metrics[name] = append(s.Metrics[name], Sample{Labels: labels, Value: v})
		}
	}
	return s
}

// recorder keeps the last gathered families and feeds the trend history.
// The page's Snapshot (a label map per sample) is built from them only
// when the page asks: a scrape pays for the history's two metrics, read
// in one pass each, not for a map per exported series.
type recorder struct {
	mu      sync.Mutex
	at      time.Time
	mfs     []*dto.MetricFamily
	last    *Snapshot
	history *history.Store
}

func (r *recorder) record(at time.Time, mfs []*dto.MetricFamily) {
	r.mu.Lock()
	r.at, r.mfs, r.last = at, mfs, nil
	r.mu.Unlock()
	var pending, lag, deadline *dto.MetricFamily
	for _, mf := range mfs {
		switch mf.GetName() {
		case vocab.OutboxOldestPendingAge:
			pending = mf
		case vocab.ConsumerLagSeconds:
			lag = mf
		case vocab.ConsumerDeadline:
			deadline = mf
		}
	}
	for o, v := range maxByLabels(pending, vocab.LabelOutbox, "") {
		r.history.Add(outboxKey(o[0]), at, v)
	}
	lags := maxByLabels(lag, vocab.LabelCluster, vocab.LabelGroup)
	for _, m := range deadline.GetMetric() {
		c, g := labelValue(m, vocab.LabelCluster), labelValue(m, vocab.LabelGroup)
		r.history.Add(groupKey(c, g), at, lags[[2]string{c, g}])
	}
}

// maxByLabels is Snapshot.MaxBy over a gathered family (nil: empty).
func maxByLabels(mf *dto.MetricFamily, k1, k2 string) map[[2]string]float64 {
	out := map[[2]string]float64{}
	for _, m := range mf.GetMetric() {
		v, ok := sampleValue(m)
		if !ok {
			continue
		}
		k := [2]string{labelValue(m, k1), labelValue(m, k2)}
		if old, seen := out[k]; !seen || v > old {
			out[k] = v
		}
	}
	return out
}

func labelValue(m *dto.Metric, name string) string {
	if name == "" {
		return ""
	}
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func sampleValue(m *dto.Metric) (float64, bool) {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	}
	return 0, false
}

// snapshot returns the last collection as a Snapshot, built on first ask.
func (r *recorder) snapshot() *Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil && r.mfs != nil {
		r.last = newSnapshot(r.at, r.mfs)
	}
	return r.last
}

func outboxKey(o string) string   { return "outbox/" + o }
func groupKey(c, g string) string { return "group/" + c + "/" + g }

// recordingGatherer hands every gathered result to the recorder.
type recordingGatherer struct {
	g   prometheus.Gatherer
	rec *recorder
	now func() time.Time
}

func (r recordingGatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := r.g.Gather()
	if len(mfs) > 0 {
		r.rec.record(r.now(), mfs)
	}
	return mfs, err
}
