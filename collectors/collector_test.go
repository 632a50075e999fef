package collectors

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

var fakeDesc = prometheus.NewDesc("outbox_fake", "A test metric.", []string{"target"}, nil)

// fake is a Collector whose behaviour a test scripts: it counts calls,
// can block until released, and can fail.
type fake struct {
	target  string
	calls   atomic.Int32
	block   chan struct{}
	fail    bool
	ignores bool // ignores ctx while blocked, like a driver that does not cancel
}

func (f *fake) Name() string                        { return "fake" }
func (f *fake) Target() string                      { return f.target }
func (f *fake) Describe(ch chan<- *prometheus.Desc) { ch <- fakeDesc }
func (f *fake) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	f.calls.Add(1)
	ch <- prometheus.MustNewConstMetric(fakeDesc, prometheus.GaugeValue, 1, f.target)
	if f.block != nil {
		if f.ignores {
			<-f.block
		} else {
			select {
			case <-f.block:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if f.fail {
		return errors.New("boom")
	}
	return nil
}

type scrapeOnce struct {
	e   *Exporter
	ctx context.Context
}

func (s scrapeOnce) Describe(ch chan<- *prometheus.Desc) { s.e.Describe(ch) }
func (s scrapeOnce) Collect(ch chan<- prometheus.Metric) {
	for _, m := range s.e.Collect(s.ctx) {
		ch <- m
	}
}

func TestFailingCollectorReportsZeroOthersWork(t *testing.T) {
	e := NewExporter(testutil.Quiet(), &fake{target: "a"}, &fake{target: "b", fail: true})
	want := `
# HELP outbox_exporter_collector_success 1 if the last collection of this collector and target worked, 0 if it failed or timed out.
# TYPE outbox_exporter_collector_success gauge
outbox_exporter_collector_success{collector="fake",target="a"} 1
outbox_exporter_collector_success{collector="fake",target="b"} 0
# HELP outbox_fake A test metric.
# TYPE outbox_fake gauge
outbox_fake{target="a"} 1
outbox_fake{target="b"} 1
`
	if err := promtestutil.CollectAndCompare(scrapeOnce{e, context.Background()}, strings.NewReader(want),
		"outbox_exporter_collector_success", "outbox_fake"); err != nil {
		t.Fatal(err)
	}
}

// A collector that ignores its context cannot hold a scrape past the
// deadline; it is reported failed.
func TestDeadlineBoundsAStalledCollector(t *testing.T) {
	stall := &fake{target: "stalled", block: make(chan struct{}), ignores: true}
	defer close(stall.block)
	e := NewExporter(testutil.Quiet(), stall, &fake{target: "ok"})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var ms []prometheus.Metric
	testutil.Bounded(t, "a scrape with a stalled collector", 200*time.Millisecond, func() { ms = e.Collect(ctx) })
	got := map[string]float64{}
	for _, m := range ms {
		if m.Desc() == successDesc {
			var pb = testutil.MetricValue(t, m)
			got[testutil.LabelOf(t, m, "target")] = pb
		}
	}
	if got["stalled"] != 0 || got["ok"] != 1 {
		t.Fatalf("success by target = %v, want stalled 0 ok 1", got)
	}
}

// Concurrent scrapes share one collection instead of each running its own.
func TestConcurrentScrapesShareOneCollection(t *testing.T) {
	f := &fake{target: "a", block: make(chan struct{})}
	e := NewExporter(testutil.Quiet(), f)
	var wg sync.WaitGroup
	results := make([]int, 20)
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			results[i] = len(e.Collect(ctx))
		}(i)
	}
	// Let the scrapes pile up behind the first, then release it.
	deadline := time.Now().Add(2 * time.Second)
	for f.calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(f.block)
	wg.Wait()
	if n := f.calls.Load(); n > 2 {
		t.Errorf("20 concurrent scrapes ran Update %d times; want them to share", n)
	}
	for i, n := range results {
		if n != 3 {
			t.Errorf("scrape %d got %d metrics, want 3", i, n)
		}
	}
}

// panicky is a collector with a bug.
type panicky struct{ fake }

func (p *panicky) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	panic("label value is not valid UTF-8")
}

// A collector that panics fails its own collection; the exporter and the
// other collectors go on.
func TestPanickingCollectorFailsAlone(t *testing.T) {
	e := NewExporter(testutil.Quiet(), &panicky{fake{target: "bad"}}, &fake{target: "good"})
	got := map[string]float64{}
	for _, m := range e.Collect(context.Background()) {
		if m.Desc() == successDesc {
			got[testutil.LabelOf(t, m, "target")] = testutil.MetricValue(t, m)
		}
	}
	if got["bad"] != 0 || got["good"] != 1 {
		t.Fatalf("success by target = %v, want bad 0 good 1", got)
	}
}
