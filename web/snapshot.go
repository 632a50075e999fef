package web

import (
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

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
			var v float64
			switch {
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			case m.Counter != nil:
				v = m.Counter.GetValue()
			default:
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

// recorder keeps the last snapshot and feeds the trend history.
type recorder struct {
	mu      sync.RWMutex
	last    *Snapshot
	history *history.Store
}

func (r *recorder) record(s *Snapshot) {
	r.mu.Lock()
	r.last = s
	r.mu.Unlock()
	// One pass over each metric: the history costs what the series do,
	// not series x series (a Max per group scanned every lag sample).
	for o, v := range s.MaxBy("outbox_oldest_pending_age_seconds", "outbox") {
		r.history.Add(outboxKey(o[0]), s.At, v)
	}
	lag := s.MaxBy("outbox_consumer_lag_seconds", "cluster", "group")
	for _, smp := range s.Metrics["outbox_consumer_deadline_seconds"] {
		c, g := smp.Labels["cluster"], smp.Labels["group"]
		r.history.Add(groupKey(c, g), s.At, lag[[2]string{c, g}])
	}
}

func (r *recorder) snapshot() *Snapshot {
	r.mu.RLock()
	defer r.mu.RUnlock()
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
		r.rec.record(newSnapshot(r.now(), mfs))
	}
	return mfs, err
}
