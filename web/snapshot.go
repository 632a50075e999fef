package web

import (
	"sort"
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

// pageFamilies are the families the page reads from the last
// collection (TestPageFamiliesCoverTheirReaders holds this list to the
// page's code). The recorder keeps only these between scrapes: the
// per-partition families and the rest of a scrape are not retained.
var pageFamilies = map[string]bool{
	vocab.CollectorSuccess: true, vocab.CollectorDuration: true,
	vocab.OutboxOldestPendingAge: true, vocab.OutboxDeadline: true, vocab.OutboxPastDeadline: true,
	vocab.OutboxRetried: true, vocab.OutboxUnknownResult: true, vocab.OutboxEvents: true,
	vocab.ConsumerLagSeconds: true, vocab.ConsumerLagMessages: true, vocab.ConsumerGroupMembers: true,
	vocab.ConsumerUncommitted: true, vocab.ConsumerDeadline: true,
	vocab.ShareGroupInfo: true, vocab.ShareGroupLagMessages: true, vocab.ShareGroupLagSeconds: true,
	vocab.ShareGroupMembers:    true,
	vocab.ReconcileRowsChecked: true, vocab.ReconcileLastSuccess: true, vocab.ReconcileGaps: true,
	vocab.AuditChecked: true, vocab.AuditMissingInBroker: true, vocab.AuditUnmarkedInBroker: true,
	vocab.AuditDuplicates: true,
	vocab.CDCDeadline:     true, vocab.CDCSlotMissing: true, vocab.CDCSlotLagSeconds: true, vocab.CDCSlotLagBytes: true,
	vocab.CDCSlotLagLowerBound: true, vocab.CDCSlotLagUpperBound: true, vocab.CDCSlotActive: true,
	vocab.CDCSlotLagAtLeastSeconds: true, vocab.CDCSlotWALStatus: true,
}

// sampleRun is a run of samples of one family with the same label
// names: their label values, len(keys) per sample, and their values.
// A sample costs its values' string headers and a float, not a
// dto.Metric with a LabelPair per label.
type sampleRun struct {
	keys   []string
	vals   []string
	values []float64
}

// compactFamily is one family the page reads, in the order gathered.
type compactFamily struct {
	name string
	runs []sampleRun
}

// compactFamilies keeps the gauge and counter samples of the families
// the page reads; the label value strings are shared with the gathered
// families, not copied.
func compactFamilies(mfs []*dto.MetricFamily) []compactFamily {
	var out []compactFamily
	for _, mf := range mfs {
		if !pageFamilies[mf.GetName()] {
			continue
		}
		f := compactFamily{name: mf.GetName()}
		var run *sampleRun
		for i, m := range mf.Metric {
			v, ok := sampleValue(m)
			if !ok {
				continue
			}
			if run == nil || !sameKeys(run.keys, m.Label) {
				// Sized for the rest of the family: one run, as a
				// family of one descriptor is, takes no more.
				rest := len(mf.Metric) - i
				keys := make([]string, len(m.Label))
				for j, l := range m.Label {
					keys[j] = l.GetName()
				}
				f.runs = append(f.runs, sampleRun{keys: keys,
					vals: make([]string, 0, rest*len(keys)), values: make([]float64, 0, rest)})
				run = &f.runs[len(f.runs)-1]
			}
			for _, l := range m.Label {
				run.vals = append(run.vals, l.GetValue())
			}
			run.values = append(run.values, v)
		}
		out = append(out, f)
	}
	return out
}

func sameKeys(keys []string, labels []*dto.LabelPair) bool {
	if len(keys) != len(labels) {
		return false
	}
	for i, l := range labels {
		if keys[i] != l.GetName() {
			return false
		}
	}
	return true
}

// newSnapshot builds the page's Snapshot (a label map per sample) from
// the kept families.
func newSnapshot(at time.Time, fams []compactFamily) *Snapshot {
	s := &Snapshot{At: at, Metrics: map[string][]Sample{}}
	for _, f := range fams {
		for _, run := range f.runs {
			n := len(run.keys)
			for i, v := range run.values {
				labels := make(map[string]string, n)
				for j, k := range run.keys {
					labels[k] = run.vals[i*n+j]
				}
				s.Metrics[f.name] = append(s.Metrics[f.name], Sample{Labels: labels, Value: v})
			}
		}
	}
	return s
}

// recorder keeps the page's families of the last gathering, compacted,
// and feeds the trend history. The page's Snapshot is built from them
// only when the page asks: a scrape pays for the history's two metrics,
// read in one pass each, and for a slice of label values per kept
// series, not for a map per exported series.
type recorder struct {
	mu      sync.Mutex
	at      time.Time
	fams    []compactFamily
	have    bool
	last    *Snapshot
	history *history.Store
}

func (r *recorder) record(at time.Time, mfs []*dto.MetricFamily) {
	fams := compactFamilies(mfs)
	r.mu.Lock()
	r.at, r.fams, r.have, r.last = at, fams, true, nil
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
	if r.last == nil && r.have {
		r.last = newSnapshot(r.at, r.fams)
	}
	return r.last
}

// lastAt returns when the last collection was recorded, and whether there
// was one, without building the page's Snapshot: the background
// collection asks every history step, and a Snapshot built for that
// would be kept, a label map per series, until the next collection.
func (r *recorder) lastAt() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at, r.have
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
