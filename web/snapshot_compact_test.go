package web

import (
	"bytes"
	"context"
	"go/ast"
	"go/constant"
	"go/token"
	"math/rand/v2"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
	"github.com/outbox-exporter/outbox_exporter/web/history"
)

// fullSnapshot is the page's Snapshot of every outbox_ gauge and counter
// of a gathering, as the recorder built it before it kept only the
// page's families: the reference the compact recorder must match.
func fullSnapshot(at time.Time, mfs []*dto.MetricFamily) *Snapshot {
	s := &Snapshot{At: at, Metrics: map[string][]Sample{}}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			v, ok := sampleValue(m)
			if !ok || len(mf.GetName()) < 7 || mf.GetName()[:7] != "outbox_" {
				continue
			}
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			s.Metrics[mf.GetName()] = append(s.Metrics[mf.GetName()], Sample{Labels: labels, Value: v})
		}
	}
	return s
}

// richFamilies is a seeded gathering over every family the exporter
// exports (every name in vocab, not the recorder's list): outboxes, consumer and share groups (per group and per
// partition), CDC slots, reconcile and audit findings, collector
// results, the exporter's own metrics, and a histogram; label sets vary
// within a family (a label missing, an empty value) and values collide.
func richFamilies(seed uint64, exported []string) []*dto.MetricFamily {
	rng := rand.New(rand.NewPCG(seed, 27))
	pick := func(prefix string, n int) string { return prefix + strconv.Itoa(rng.IntN(n)) }
	labelPool := map[string]func() string{
		vocab.LabelOutbox:    func() string { return pick("o", 4) },
		vocab.LabelCluster:   func() string { return pick("c", 2) },
		vocab.LabelGroup:     func() string { return pick("g", 6) },
		vocab.LabelTopic:     func() string { return pick("t", 3) },
		vocab.LabelPartition: func() string { return pick("", 4) },
		vocab.LabelCDC:       func() string { return pick("s", 3) },
		vocab.LabelReconcile: func() string { return pick("j", 3) },
		vocab.LabelKind:      func() string { return vocab.GapKinds[rng.IntN(len(vocab.GapKinds))] },
		vocab.LabelState:     func() string { return vocab.EventStates[rng.IntN(len(vocab.EventStates))] },
		"status":             func() string { return []string{"reserved", "extended", "unreserved", "lost"}[rng.IntN(4)] },
		"event_type":         func() string { return pick("e", 2) },
	}
	names := append([]string{"outbox_not_on_the_page", "go_goroutines"}, exported...)
	var mfs []*dto.MetricFamily
	for _, name := range names {
		mf := &dto.MetricFamily{Name: proto.String(name), Type: dto.MetricType_GAUGE.Enum()}
		for i := rng.IntN(12); i > 0; i-- {
			m := &dto.Metric{}
			switch rng.IntN(8) {
			case 0:
				m.Counter = &dto.Counter{Value: proto.Float64(float64(rng.IntN(5)))}
			case 1:
				m.Histogram = &dto.Histogram{SampleCount: proto.Uint64(1)} // no value the page reads
			default:
				m.Gauge = &dto.Gauge{Value: proto.Float64([]float64{0, 1, 2, 45, 90, 600, rng.Float64() * 1e4}[rng.IntN(7)])}
			}
			if name == vocab.CollectorSuccess || name == vocab.CollectorDuration {
				c := []string{"outbox", "kafka", "cdc", "reconcile", "audit"}[rng.IntN(5)]
				target := map[string]string{"outbox": "o", "kafka": "c", "cdc": "s", "reconcile": "j", "audit": "o"}[c]
				m.Label = append(m.Label, &dto.LabelPair{Name: proto.String("collector"), Value: proto.String(c)},
					&dto.LabelPair{Name: proto.String("target"), Value: proto.String(pick(target, 4))})
			}
			for _, l := range []string{"cdc", "cluster", "event_type", "group", "kind", "outbox", "partition", "reconcile", "state", "status", "topic"} {
				if rng.IntN(3) == 0 && (rng.IntN(4) != 0 || l != vocab.LabelGroup) {
					continue
				}
				v := labelPool[l]()
				if rng.IntN(20) == 0 {
					v = ""
				}
				m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(l), Value: proto.String(v)})
			}
			mf.Metric = append(mf.Metric, m)
		}
		mfs = append(mfs, mf)
	}
	return mfs
}

// pageServer is a Server that renders the page from rec alone.
func pageServer(rec *recorder) *Server {
	return &Server{rec: rec, reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})}
}

// The page rendered from the recorder's compact families is the page
// rendered from every gathered family, on seeded rich gatherings: views
// and HTML alike, trends included.
func TestCompactRecorderShowsTheFullPage(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	req := httptest.NewRequest("GET", "/", nil)
	shown := map[string]int{}
	exported := vocabMetricNames(t, "../internal/vocab")
	for seed := uint64(0); seed < 200; seed++ {
		hist := history.New(time.Hour, 15*time.Second, 500)
		rec := &recorder{history: hist}
		mfs := richFamilies(seed, exported)
		rec.record(now, mfs)
		full := &recorder{history: hist}
		full.last = fullSnapshot(now, mfs)

		got, want := pageServer(rec).pageData(req, now), pageServer(full).pageData(req, now)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: page data differ\ncompact: %+v\nfull:    %+v", seed, got, want)
		}
		var gh, wh bytes.Buffer
		if err := pageTmpl.Execute(&gh, got); err != nil {
			t.Fatal(err)
		}
		if err := pageTmpl.Execute(&wh, want); err != nil {
			t.Fatal(err)
		}
		if gh.String() != wh.String() {
			t.Fatalf("seed %d: pages differ:\n%s", seed, diffLines(wh.String(), gh.String()))
		}
		for section, n := range map[string]int{"outboxes": len(want.Outboxes), "groups": len(want.Groups),
			"share groups": len(want.ShareGroups), "reconciles": len(want.Reconciles), "audits": len(want.Audits),
			"cdc": len(want.CDC), "collectors": len(want.Collectors)} {
			if n > 0 {
				shown[section]++
			}
		}
	}
	// Every section of the page had something to show on most seeds.
	for _, section := range []string{"outboxes", "groups", "share groups", "reconciles", "audits", "cdc", "collectors"} {
		if shown[section] < 100 {
			t.Errorf("the page showed %s on %d of 200 seeds, want at least 100", section, shown[section])
		}
	}
}

// TestPageFamiliesCoverTheirReaders: every metric named (vocab.X) in a
// function of the page that reads the last collection (takes a
// *Snapshot, or asks the recorder for one) is a family the recorder
// keeps, so a family the page starts to read cannot be dropped between
// scrapes unseen; and the recorder keeps no other. The code is read from
// the package's source.
func TestPageFamiliesCoverTheirReaders(t *testing.T) {
	consts := vocabConsts(t, "../internal/vocab")
	read := map[string]bool{}
	for _, f := range sourceFiles(t, ".") {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !readsSnapshot(fn) {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, isID := sel.X.(*ast.Ident); isID && id.Name == "vocab" {
					if v, isMetric := consts[sel.Sel.Name]; isMetric {
						read[v] = true
					}
				}
				return true
			})
		}
	}
	if len(read) < 25 {
		t.Fatalf("found %d metrics the page reads, want at least 25: %v", len(read), read)
	}
	for name := range read {
		if !pageFamilies[name] {
			t.Errorf("the page reads %s, which the recorder does not keep", name)
		}
	}
	for name := range pageFamilies {
		if !read[name] {
			t.Errorf("the recorder keeps %s, which the page does not read", name)
		}
	}
}

// readsSnapshot reports whether fn takes a *Snapshot or calls snapshot().
func readsSnapshot(fn *ast.FuncDecl) bool {
	for _, p := range fn.Type.Params.List {
		if star, ok := p.Type.(*ast.StarExpr); ok {
			if id, ok := star.X.(*ast.Ident); ok && id.Name == "Snapshot" {
				return true
			}
		}
	}
	found := false
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "snapshot" {
				found = true
			}
		}
		return !found
	})
	return found
}

// vocabConsts maps each constant of vocab naming a metric (outbox_...)
// to its value.
func vocabConsts(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range sourceFiles(t, dir) {
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok || len(vs.Names) != len(vs.Values) {
				return true
			}
			for i, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				if s := constant.StringVal(constant.MakeFromLiteral(lit.Value, lit.Kind, 0)); strings.HasPrefix(s, "outbox_") {
					out[vs.Names[i].Name] = s
				}
			}
			return true
		})
	}
	return out
}

// Deciding whether the background collection is due reads only the
// time of the last one: the page's Snapshot is not built for it (and
// then kept until the next collection).
func TestRefreshDueBuildsNoSnapshot(t *testing.T) {
	at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	rec := &recorder{history: history.New(time.Hour, historyStep, 500)}
	s := pageServer(rec)
	if !s.refreshDue(at) {
		t.Fatal("refresh not due before any collection")
	}
	rec.record(at, richFamilies(1, vocabMetricNames(t, "../internal/vocab")))
	if s.refreshDue(at.Add(historyStep - time.Second)) {
		t.Fatal("refresh due within a history step of the last collection")
	}
	if !s.refreshDue(at.Add(historyStep)) {
		t.Fatal("refresh not due a history step after the last collection")
	}
	if rec.last != nil {
		t.Fatal("refreshDue built the page's Snapshot")
	}
	if s.freshenForPage(context.Background(), at); rec.last != nil {
		t.Fatal("freshenForPage built the page's Snapshot")
	}
}
