package kafka

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaCachesNeverStale: one collector kept across scrapes (its probe
// cache, plan and series caches warm) answers every scrape exactly as a
// new collector does (the oracle: no cache, every record read), over
// seeded rounds where commits move on and back, records are appended
// and groups stop committing, with per-partition series on. A found
// difference keeps its seed here.
func TestKafkaCachesNeverStale(t *testing.T) { onBoth(t, 2, cachesNeverStale) }

func cachesNeverStale(t *testing.T, e kenv) {
	k := kafkaCfg(e.Brokers(), e.pat("/g.*/"))
	k.PerPartition = true
	cl, adm := kafkaAdmin(t, k)
	topic := e.n("events")
	const parts, records = 4, 12
	seedTopic(t, cl, adm, topic, parts, records)
	ends := make([]int64, parts)
	for p := range ends {
		ends[p] = records
	}
	rng := rand.New(rand.NewPCG(20, 5))
	groups := []string{e.n("g0"), e.n("g1"), e.n("g2")}
	move := func() {
		for _, g := range groups {
			at := map[int32]int64{}
			for p := int32(0); p < parts; p++ {
				if rng.IntN(3) > 0 {
					at[p] = rng.Int64N(ends[p] + 1)
				}
			}
			if len(at) > 0 {
				commit(t, adm, g, topic, at)
			}
		}
	}
	move()
	kept := newKafka(t, k)
	now := kafkaBase.Add(time.Hour)
	kept.now = func() time.Time { return now }
	for round := 0; round < 6; round++ {
		got, err := scrape(t, kept, 20*time.Second)
		if err != nil {
			t.Fatalf("round %d: kept collector: %v", round, err)
		}
		fresh := newKafka(t, k)
		fresh.now = kept.now
		want, err := scrape(t, fresh, 20*time.Second)
		fresh.Close()
		if err != nil {
			t.Fatalf("round %d: new collector: %v", round, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("round %d: kept collector answers\n%v\na new one\n%v", round, got, want)
		}
		if len(want) < 3*len(groups) {
			t.Fatalf("round %d: only %d series: nothing compared", round, len(want))
		}
		// Next round: commits move (on or back), and a partition grows.
		move()
		p := int32(rng.IntN(parts))
		var rs []*kgo.Record
		for i := 0; i < 1+rng.IntN(3); i++ {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: p, Value: []byte("v"), Timestamp: kafkaBase.Add(time.Duration(ends[p]) * time.Second)})
			ends[p]++
		}
		if err := cl.ProduceSync(kafkaCtx(t), rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
	}
}
