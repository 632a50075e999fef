package web

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/outbox-exporter/outbox_exporter/web/history"
)

// MaxBy against the brute force it replaced on the scrape path: a Max
// per distinct label pair over seeded random samples.
func TestSnapshotMaxByMatchesMax(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		s := &Snapshot{Metrics: map[string][]Sample{}}
		for i := 0; i < 200; i++ {
			l := map[string]string{"cluster": "c" + strconv.Itoa(rng.IntN(3)), "group": "g" + strconv.Itoa(rng.IntN(20)), "topic": "t" + strconv.Itoa(rng.IntN(4))}
			s.Metrics["m"] = append(s.Metrics["m"], Sample{Labels: l, Value: rng.Float64()*100 - 10})
		}
		got := s.MaxBy("m", "cluster", "group")
		seen := 0
		for c := 0; c < 3; c++ {
			for g := 0; g < 20; g++ {
				k := [2]string{"c" + strconv.Itoa(c), "g" + strconv.Itoa(g)}
				want, ok := s.Max("m", map[string]string{"cluster": k[0], "group": k[1]})
				v, gok := got[k]
				if ok != gok || v != want {
					t.Fatalf("seed %d %v: MaxBy %v,%v; Max %v,%v", seed, k, v, gok, want, ok)
				}
				if ok {
					seen++
				}
			}
		}
		if seen != len(got) {
			t.Fatalf("seed %d: MaxBy has %d keys, Max found %d", seed, len(got), seen)
		}
	}
}

// The recorder's history, read from the gathered families in one pass,
// against the brute force over the page's Snapshot (a Max per group and
// per outbox), on seeded random families.
func TestRecorderHistoryMatchesSnapshotMax(t *testing.T) {
	for seed := uint64(0); seed < 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 2))
		gauge := func(name string, labels map[string]string, v float64) *dto.Metric {
			m := &dto.Metric{Gauge: &dto.Gauge{Value: proto.Float64(v)}}
			for k, val := range labels {
				m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(k), Value: proto.String(val)})
			}
			return m
		}
		fam := func(name string) *dto.MetricFamily {
			return &dto.MetricFamily{Name: proto.String(name), Type: dto.MetricType_GAUGE.Enum()}
		}
		lag, dl, pend := fam("outbox_consumer_lag_seconds"), fam("outbox_consumer_deadline_seconds"), fam("outbox_oldest_pending_age_seconds")
		for g := 0; g < 30; g++ {
			l := map[string]string{"cluster": "c" + strconv.Itoa(g%2), "group": "g" + strconv.Itoa(g)}
			dl.Metric = append(dl.Metric, gauge("", l, 60))
			for tp := 0; tp < rng.IntN(4); tp++ { // some groups have no lag series
				lag.Metric = append(lag.Metric, gauge("", map[string]string{"cluster": l["cluster"], "group": l["group"], "topic": "t" + strconv.Itoa(tp)}, rng.Float64()*1000))
			}
		}
		for o := 0; o < 5; o++ {
			for i := 0; i < 3; i++ {
				pend.Metric = append(pend.Metric, gauge("", map[string]string{"outbox": "o" + strconv.Itoa(o), "event_type": strconv.Itoa(i)}, rng.Float64()*100))
			}
		}
		at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		r := &recorder{history: history.New(time.Hour, 15*time.Second, 500)}
		mfs := []*dto.MetricFamily{lag, dl, pend}
		r.record(at, mfs)
		snap := r.snapshot()
		for _, smp := range snap.Metrics["outbox_consumer_deadline_seconds"] {
			c, g := smp.Labels["cluster"], smp.Labels["group"]
			want, _ := snap.Max("outbox_consumer_lag_seconds", map[string]string{"cluster": c, "group": g})
			got := r.history.Get(groupKey(c, g), at)
			if len(got) != 1 || got[0].V != want {
				t.Fatalf("seed %d %s/%s: history %v, want %v", seed, c, g, got, want)
			}
		}
		for _, o := range snap.Values("outbox_oldest_pending_age_seconds", "outbox") {
			want, _ := snap.Max("outbox_oldest_pending_age_seconds", map[string]string{"outbox": o})
			if got := r.history.Get(outboxKey(o), at); len(got) != 1 || got[0].V != want {
				t.Fatalf("seed %d outbox %s: history %v, want %v", seed, o, got, want)
			}
		}
		if n := len(r.history.Keys()); n != 35 {
			t.Fatalf("seed %d: %d history series, want 30 groups + 5 outboxes", seed, n)
		}
	}
}
