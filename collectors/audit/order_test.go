package audit

import (
	"context"
	"fmt"
	"math/rand"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

func orderRec(topic string, partition int32, offset int64, agg string, seq int64, ts time.Time) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: partition, Offset: offset, Timestamp: ts,
		Key:     []byte(agg),
		Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(fmt.Sprintf("%s-%d", agg, seq))}, {Key: "seq", Value: []byte(strconv.FormatInt(seq, 10))}},
		Value:   []byte(secretBody)}
}

func tracker(t *testing.T, agg, seq string) *orderTracker {
	t.Helper()
	tr, err := newOrderTracker(&config.Audit{Aggregate: agg, Sequence: seq, Window: time.Hour})
	if err != nil || tr == nil {
		t.Fatalf("tracker: %v", err)
	}
	return tr
}

// Seeded streams of many aggregates over several partitions, each
// aggregate's records mostly in order, with gaps, repeats and some swapped
// pairs (two relays); the count is compared with a brute force over all
// records: a record counts when an earlier record of its aggregate on its
// partition has a higher sequence.
func TestOrderInversionsAgainstOracle(t *testing.T) {
	for _, seed := range []int64{1, 2, 3, 4} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			base := time.Now()
			type r struct {
				p   int32
				agg string
				seq int64
			}
			var stream []r
			next := map[string]int64{}
			lastAt := map[string]int{}
			for i := 0; i < 20000; i++ {
				a := rng.Intn(800)
				agg := fmt.Sprintf("conv-%d", a)
				next[agg] += 1 + int64(rng.Intn(2)) // gaps: 9 then 11
				s := next[agg]
				if rng.Intn(50) == 0 {
					s = next[agg] - 1 // a repeat, or the skipped one late
				}
				// Keyed by aggregate, so one partition per aggregate.
				stream = append(stream, r{int32(a % 3), agg, s})
				if j, ok := lastAt[agg]; ok && rng.Intn(40) == 0 {
					// Two relays: this event reached the broker before
					// the aggregate's previous one.
					stream[j].seq, stream[i].seq = stream[i].seq, stream[j].seq
				}
				lastAt[agg] = i
			}
			if seed == 1 {
				// A healthy stream: strictly in order per aggregate.
				for i := range stream {
					stream[i].seq = int64(i)
				}
			}
			want := uint64(0)
			for i, x := range stream {
				for _, y := range stream[:i] {
					if y.p == x.p && y.agg == x.agg && y.seq > x.seq {
						want++
						break
					}
				}
			}
			if seed == 1 && want != 0 || seed != 1 && want == 0 {
				t.Fatalf("generator: %d inversions", want)
			}
			tr := tracker(t, "key", "header:seq")
			offsets := map[int32]int64{}
			for _, x := range stream {
				tr.observe(orderRec("messages", x.p, offsets[x.p], x.agg, x.seq, base), base.UnixMilli())
				offsets[x.p]++
			}
			if got := tr.stats().Inversions; got != want {
				t.Errorf("inversions %d, want %d", got, want)
			}
		})
	}
}

// E10 then E9 on one partition is one inversion, listed with both
// sequences and offsets; 9 then 11 (a gap) and a repeat are none; the
// same aggregate on another partition is judged apart.
func TestOrderInversionE9E10(t *testing.T) {
	tr := tracker(t, "json:payload.conversation", "json:payload.seq")
	now := time.Now()
	j := func(p int32, off int64, conv string, seq int) {
		tr.observe(&kgo.Record{Topic: "messages", Partition: p, Offset: off, Timestamp: now,
			Value: []byte(fmt.Sprintf(`{"schema":{"x":[1,2]},"payload":{"conversation":%q,"seq":%d,"body":"%s"}}`, conv, seq, secretBody))},
			now.Add(-time.Minute).UnixMilli())
	}
	j(0, 0, "c1", 9)
	j(0, 1, "c1", 11) // gap
	j(0, 2, "c1", 11) // repeat
	j(1, 0, "c1", 10) // another partition
	j(0, 3, "c2", 10)
	j(0, 4, "c2", 9) // E9 after E10
	j(0, 5, "c2", 8) // still late
	s := tr.stats()
	if s.Inversions != 2 || len(s.Last) != 2 {
		t.Fatalf("stats %+v, want 2 inversions listed", s)
	}
	got := s.Last[0]
	if got.Aggregate != "c2" || got.Sequence != 9 || got.After != 10 || got.Offset != 4 || got.AfterOffset != 3 || got.Partition != 0 || got.Reread {
		t.Errorf("first inversion %+v", got)
	}
	if s.Aggregates != 3 || s.Unreadable != 0 {
		t.Errorf("aggregates %d unreadable %d, want 3 and 0", s.Aggregates, s.Unreadable)
	}
	tr.observe(&kgo.Record{Topic: "messages", Value: []byte(`{"payload":{"conversation":"c3","seq":"x"}}`)}, 0)
	tr.observe(&kgo.Record{Topic: "messages", Value: []byte(`{"payload":{"conversation":{"a":1},"seq":1}}`)}, 0)
	if s := tr.stats(); s.Unreadable != 2 {
		t.Errorf("unreadable %d, want 2", s.Unreadable)
	}
}

// The bound: past the cap, new aggregates are not judged (and counted as
// untracked) until old ones leave the window.
func TestOrderAggregateBound(t *testing.T) {
	tr := tracker(t, "key", "header:seq")
	tr.limit = 10
	now := time.Now()
	for i := 0; i < 20; i++ {
		tr.observe(orderRec("m", 0, int64(i), fmt.Sprintf("a%d", i), 1, now), 0)
	}
	if s := tr.stats(); s.Aggregates != 10 || s.Untracked != 10 {
		t.Fatalf("aggregates %d untracked %d, want 10 and 10", s.Aggregates, s.Untracked)
	}
	// Two hours on, the old aggregates have left the window.
	later := now.Add(2 * time.Hour)
	tr.observe(orderRec("m", 0, 20, "a0", 5, later), 0)
	tr.observe(orderRec("m", 0, 21, "new", 1, later), 0)
	if s := tr.stats(); s.Aggregates != 2 || s.Untracked != 10 {
		t.Fatalf("after the window: aggregates %d untracked %d, want 2 and 10", s.Aggregates, s.Untracked)
	}
}

// Through the tailer, over kfake: the inversion produced after the start
// is counted; an auditor started afterwards re-reads the window, lists it
// as re-read and counts nothing.
func TestOrderInversionsTailerAndRestart(t *testing.T) {
	f := newFixture(t)
	cfg := func() *config.Audit {
		return &config.Audit{Kafka: "main", Topics: []string{"messages", "messages.retry"}, EventID: "header:event_id",
			Sample: 1, Grace: time.Minute, Window: time.Hour, Aggregate: "key", Sequence: "header:seq"}
	}
	start := func() *Auditor {
		a, err := New("messages", cfg(), f.ob, f.kcfg, f.pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		a.SetCompareInterval(time.Hour)
		ctx, cancel := context.WithCancel(context.Background())
		a.Start(ctx)
		t.Cleanup(func() { cancel(); a.Close() })
		waitReady(t, a)
		return a
	}
	a := start()
	now := time.Now()
	f.produce(orderRec("messages", 0, 0, "conv-1", 10, now), orderRec("messages", 0, 0, "conv-1", 9, now),
		orderRec("messages", 1, 0, "conv-2", 9, now), orderRec("messages", 1, 0, "conv-2", 11, now))
	waitRecords(t, a, 4)
	if s := a.OrderStats(); s.Inversions != 1 {
		t.Fatalf("inversions %d, want 1", s.Inversions)
	}
	r := a.Report()
	if len(r.Inversions) != 1 || r.Inversions[0].Aggregate != "conv-1" || r.Inversions[0].After != 10 || r.Inversions[0].Sequence != 9 {
		t.Fatalf("report inversions %+v", r.Inversions)
	}
	ms := collect(t, NewCollector(a))
	if v, ok := ms["outbox_audit_order_inversions_total"]; !ok || v != 1 {
		t.Fatalf("metric %v (present %v), want 1", v, ok)
	}

	// A restart: the window is re-read; nothing new is counted.
	for time.Now().UnixMilli() <= now.UnixMilli() {
		// Record timestamps are milliseconds: start strictly after them.
		runtime.Gosched()
	}
	b := start()
	waitRecords(t, b, 4)
	if s := b.OrderStats(); s.Inversions != 0 || len(s.Last) != 1 || !s.Last[0].Reread {
		t.Fatalf("after restart: %+v, want 0 counted and 1 re-read listed", s)
	}
	// A new inversion after the restart is counted once.
	f.produce(orderRec("messages", 1, 0, "conv-2", 10, time.Now()))
	waitRecords(t, b, 5)
	if s := b.OrderStats(); s.Inversions != 1 {
		t.Fatalf("new inversion after restart: %d, want 1", s.Inversions)
	}
}

// collect runs one Update and returns the value of each metric by name.
func collect(t *testing.T, c *Collector) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	if err := c.Update(context.Background(), ch); err != nil {
		t.Fatal(err)
	}
	close(ch)
	out := map[string]float64{}
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		name := m.Desc().String()
		name = name[len(`Desc{fqName: "`):]
		name = name[:len(name)-len(name[indexQuote(name):])]
		out[name] = pb.GetCounter().GetValue() + pb.GetGauge().GetValue()
	}
	return out
}

func indexQuote(s string) int {
	for i := range s {
		if s[i] == '"' {
			return i
		}
	}
	return len(s)
}

// An aggregate's sequence restarting after a delete: within the window
// its new records count as inversions (documented); after a window
// without records it starts afresh.
func TestOrderSequenceRestart(t *testing.T) {
	tr := tracker(t, "key", "header:seq")
	now := time.Now()
	for i, seq := range []int64{1, 2, 3} {
		tr.observe(orderRec("m", 0, int64(i), "conv-1", seq, now), 0)
	}
	tr.observe(orderRec("m", 0, 3, "conv-1", 1, now.Add(time.Minute)), 0)
	if s := tr.stats(); s.Inversions != 1 {
		t.Fatalf("restart within the window: %d inversions, want 1 (documented)", s.Inversions)
	}
	// A new life two hours later, past the window.
	later := now.Add(2 * time.Hour)
	tr.observe(orderRec("m", 0, 4, "conv-1", 1, later), 0)
	tr.observe(orderRec("m", 0, 5, "conv-1", 2, later), 0)
	if s := tr.stats(); s.Inversions != 1 {
		t.Fatalf("restart after the window: %d inversions, want still 1", s.Inversions)
	}
}
