package kafka

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// sendOne sends one series through c and returns what was sent (nil if
// nothing) and the errors.
func sendOne(c *seriesCache, desc *prometheus.Desc, v float64, values ...string) (prometheus.Metric, []error) {
	ch := make(chan prometheus.Metric, 1)
	var partial []error
	c.send(ch, &partial, desc, v, values...)
	close(ch)
	return <-ch, partial
}

func written(t *testing.T, m prometheus.Metric) *dto.Metric {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// TestSeriesCacheWritesWhatConstMetricWrites: the oracle is client_golang's
// own const metric, over seeded random label values and values, through
// scrapes where values move, stay, and series come and go.
func TestSeriesCacheWritesWhatConstMetricWrites(t *testing.T) {
	descs := []*prometheus.Desc{kafkaLagSecondsDesc, kafkaDeadlineDesc, kafkaGroupInfoDesc, kafkaPartLagMessagesDesc}
	rng := rand.New(rand.NewPCG(20, 1))
	c := newSeriesCache()
	for round := 0; round < 50; round++ {
		c.begin()
		for i := 0; i < 40; i++ {
			d := descs[rng.IntN(len(descs))]
			values := labelValuesFor(d, rng)
			v := float64(rng.IntN(3))
			if rng.IntN(10) == 0 {
				v = math.NaN()
			}
			got, errs := sendOne(c, d, v, values...)
			if len(errs) > 0 {
				t.Fatalf("round %d: %v", round, errs)
			}
			want := prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, values...)
			if g, w := written(t, got), written(t, want); !proto.Equal(g, w) && !(math.IsNaN(v) && math.IsNaN(g.GetGauge().GetValue())) {
				t.Fatalf("round %d: cached series writes %v, const metric %v", round, g, w)
			}
			if got.Desc() != d {
				t.Fatalf("round %d: desc %v, want %v", round, got.Desc(), d)
			}
		}
		c.end()
		for k, s := range c.entries {
			if s.gen != c.gen {
				t.Fatalf("round %d: series %v not sent this round is still cached", round, k)
			}
		}
	}
}

// labelValuesFor draws label values for d from a small set, so that
// series repeat across rounds.
func labelValuesFor(d *prometheus.Desc, rng *rand.Rand) []string {
	n := 2
	switch d {
	case kafkaLagSecondsDesc:
		n = 3
	case kafkaGroupInfoDesc, kafkaPartLagMessagesDesc:
		n = 4
	}
	vs := make([]string, n)
	for i := range vs {
		vs[i] = []string{"a", "b", "c=d", `e"f`}[rng.IntN(4)]
	}
	return vs
}

// TestSeriesCacheNeverServesAStaleValue: a value that moves is sent as a
// new gauge at once, and the gauge sent before keeps its value (an
// earlier scrape may still be encoding it); an unmoved value reuses the
// gauge.
func TestSeriesCacheNeverServesAStaleValue(t *testing.T) {
	c := newSeriesCache()
	c.begin()
	first, _ := sendOne(c, kafkaLagMessagesDesc, 10, "c", "g", "t")
	c.end()
	c.begin()
	same, _ := sendOne(c, kafkaLagMessagesDesc, 10, "c", "g", "t")
	c.end()
	if same != first {
		t.Error("an unmoved value must reuse the gauge")
	}
	c.begin()
	moved, _ := sendOne(c, kafkaLagMessagesDesc, 11, "c", "g", "t")
	c.end()
	if v := written(t, moved).GetGauge().GetValue(); v != 11 {
		t.Fatalf("moved value sent as %v, want 11", v)
	}
	if v := written(t, first).GetGauge().GetValue(); v != 10 {
		t.Fatalf("the gauge sent before changed to %v", v)
	}
	// The same labels on another metric are another series.
	other, _ := sendOne(c, kafkaLagSecondsDesc, 11, "c", "g", "t")
	if other.Desc() != kafkaLagSecondsDesc {
		t.Fatal("series of two metrics with the same labels were mixed up")
	}
}

// TestSeriesCacheRejectsInvalidUTF8: such a label value is reported and
// nothing is sent (a const metric would fail the same way).
func TestSeriesCacheRejectsInvalidUTF8(t *testing.T) {
	c := newSeriesCache()
	c.begin()
	m, errs := sendOne(c, kafkaDeadlineDesc, 1, "c", "bad\xff")
	if m != nil || len(errs) != 1 || !strings.Contains(errs[0].Error(), "UTF-8") {
		t.Fatalf("sent %v, errors %v; want nothing sent and one UTF-8 error", m, errs)
	}
	if _, err := prometheus.NewConstMetric(kafkaDeadlineDesc, prometheus.GaugeValue, 1, "c", "bad\xff"); err == nil {
		t.Fatal("client_golang accepts the value: the rule differs")
	}
}

// TestLabelSetSharedBySlots: the metrics sharing one label set (lag
// messages, lost, lag seconds of a group and topic) write what their own
// const metrics write, each with its own value, as values move.
func TestLabelSetSharedBySlots(t *testing.T) {
	c := newSeriesCache()
	descs := []*prometheus.Desc{kafkaLagMessagesDesc, kafkaLostDesc, kafkaLagSecondsDesc}
	for round := 0; round < 4; round++ {
		c.begin()
		ls := c.labels(nil, kafkaLagMessagesDesc, "c", "g", "t")
		ch := make(chan prometheus.Metric, len(descs))
		for slot, d := range descs {
			ls.send(ch, slot, d, float64(slot*10+round/2))
		}
		close(ch)
		slot := 0
		for m := range ch {
			want := prometheus.MustNewConstMetric(descs[slot], prometheus.GaugeValue, float64(slot*10+round/2), "c", "g", "t")
			if m.Desc() != descs[slot] || !proto.Equal(written(t, m), written(t, want)) {
				t.Fatalf("round %d slot %d: %v %v, want %v %v", round, slot, m.Desc(), written(t, m), want.Desc(), written(t, want))
			}
			slot++
		}
		c.end()
	}
	if len(c.entries) != 1 {
		t.Fatalf("%d label sets for one group and topic", len(c.entries))
	}
}

// TestSeriesCacheSharesPairs: a group's label sets hold one pair for its
// name, every set the one cluster pair, and a pair goes when the last set
// holding it does (a group that left leaves nothing behind).
func TestSeriesCacheSharesPairs(t *testing.T) {
	c := newSeriesCache()
	var partial []error
	c.begin()
	topicSet := c.labels(&partial, kafkaLagMessagesDesc, "main", "g1", "events")
	groupSet := c.labels(&partial, kafkaDeadlineDesc, "main", "g1")
	other := c.labels(&partial, kafkaDeadlineDesc, "main", "g2")
	c.end()
	if len(partial) > 0 {
		t.Fatal(partial)
	}
	if topicSet.labels[0] != groupSet.labels[0] || groupSet.labels[0] != other.labels[0] {
		t.Errorf("cluster pair not shared")
	}
	if topicSet.labels[1] != groupSet.labels[1] {
		t.Errorf("group pair of g1 not shared between its sets")
	}
	if got := len(c.pairs); got != 4 {
		t.Errorf("%d pairs held, want 4 (cluster, g1, g2, topic)", got)
	}
	c.begin()
	c.labels(&partial, kafkaDeadlineDesc, "main", "g2")
	c.end()
	if _, ok := c.pairs[pairKey{"group", "g1"}]; ok || len(c.pairs) != 2 {
		t.Errorf("pairs after g1 left: %v, want cluster and g2 only", c.pairs)
	}
}
