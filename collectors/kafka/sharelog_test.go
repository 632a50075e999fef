package kafka

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// scrapeShares scrapes a new collector at now and fails unless its share
// groups' offsets came from the share coordinator's log (fromLog) or
// from requests (!fromLog).
func scrapeShares(t *testing.T, k *config.Kafka, now time.Time, fromLog bool) map[string]float64 {
	t.Helper()
	c, got := scrapedAt(t, k, now)
	if c.shareLog.fromLog != fromLog {
		t.Fatalf("share offsets from the log: %v, want %v", c.shareLog.fromLog, fromLog)
	}
	return got
}

// shareSeries is the share groups' series of a scrape.
func shareSeries(got map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range got {
		if strings.HasPrefix(k, "outbox_share_group_") {
			out[k] = v
		}
	}
	return out
}

// askOffsets makes c ask the share offsets with requests, never reading
// the share coordinator's log: for the cases of the requests themselves.
func askOffsets(c *Collector) { c.shareLog.skip = math.MaxInt }

// viaRequests is a collector that asks the share offsets with
// DescribeShareGroupOffsets, never reading the log: the broker's own
// lag.
func viaRequests(t *testing.T, k *config.Kafka, now time.Time) map[string]float64 {
	t.Helper()
	c := newKafka(t, k)
	c.now = func() time.Time { return now }
	askOffsets(c)
	got, err := scrape(t, c, 30*time.Second)
	if err != nil {
		t.Fatalf("Update through requests: %v", err)
	}
	return shareSeries(got)
}

var shareLogSeeds = flag.Int("kafka.share-log-seeds", 3, "seeded share-group states whose lag from the share coordinator's log is compared with the broker's answers")

// TestKafkaShareLogAgainstBroker: on seeded share groups of Apache Kafka
// (start offsets set anywhere, consumers accepting and releasing some
// records, a group's start offset set again), every share series from
// the share coordinator's log equals what the broker's own
// DescribeShareGroupOffsets gives, on a collector reading the log from
// the start and on one that read it before the last changes (a topic
// created since among them) and reads only what was written since.
func TestKafkaShareLogAgainstBroker(t *testing.T) {
	for seed := uint64(1); seed <= uint64(*shareLogSeeds); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			e := realEnv(t)
			rng := rand.New(rand.NewPCG(seed, 932))
			k := kafkaCfg(e.Brokers())
			k.ShareGroups = []string{e.pat("/s.*/")}
			cl, adm := kafkaAdmin(t, k)
			topic, parts := e.n("t"), 1+rng.Int32N(3)
			n := 5 + rng.IntN(20)
			seedTopic(t, cl, adm, topic, parts, n)
			set := func(g string) {
				at := map[int32]int64{}
				for p := range parts {
					at[p] = rng.Int64N(int64(n) + 1)
				}
				setShareStart(t, adm, g, topic, at)
			}
			set(e.n("s0"))
			for g := range 1 + rng.IntN(2) {
				shareAckSome(t, k, cl, e.n(fmt.Sprintf("s%d", g+1)), topic, rng)
			}
			now := kafkaBase.Add(time.Hour)
			steady := newKafka(t, k)
			steady.now = func() time.Time { return now }
			for round := range 2 {
				got, err := scrape(t, steady, 30*time.Second)
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if !steady.shareLog.fromLog {
					t.Fatalf("round %d: share offsets not read from the log", round)
				}
				want := viaRequests(t, k, now)
				if len(want) == 0 {
					t.Fatal("the broker answered no share series")
				}
				if g, w := fmt.Sprint(shareSeries(got)), fmt.Sprint(want); g != w {
					t.Fatalf("round %d: from the log\n%s\nthe broker's\n%s", round, g, w)
				}
				set(e.n("s0"))
				shareAckSome(t, k, cl, e.n("s1"), topic, rng)
				if round == 0 {
					// A topic created after the first scrape: the
					// steady collector must learn its name.
					seedTopic(t, cl, adm, e.n("t2"), 1, n)
					setShareStart(t, adm, e.n("s9"), e.n("t2"), map[int32]int64{0: rng.Int64N(int64(n) + 1)})
				}
			}
			fresh := scrapeShares(t, k, now, true)
			if g, w := fmt.Sprint(shareSeries(fresh)), fmt.Sprint(viaRequests(t, k, now)); g != w {
				t.Fatalf("new collector: from the log\n%s\nthe broker's\n%s", g, w)
			}
		})
	}
}

// TestShareLogFallback: on kfake, which keeps no share coordinator log,
// the share offsets are asked with requests and the log is looked for
// again every collection; a log holding a record this reader does not
// know (here a topic of that name on kfake with a version 1 value) is not
// used either, and not read again for shareLogRetry collections. The
// lag is the broker's either way.
func TestShareLogFallback(t *testing.T) {
	kc := kafkatest.New(t, 1)
	e := kenv{Env: kc, kc: kc}
	k := kafkaCfg(e.Brokers())
	k.ShareGroups = []string{e.pat("/s.*/")}
	cl, adm := kafkaAdmin(t, k)
	topic := e.n("t")
	seedTopic(t, cl, adm, topic, 2, 10)
	setShareStart(t, adm, e.n("s0"), topic, map[int32]int64{0: 3, 1: 7})
	now := kafkaBase.Add(time.Hour)
	c := newKafka(t, k)
	c.now = func() time.Time { return now }
	for round := range 2 {
		got, err := scrape(t, c, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if c.shareLog.fromLog || c.shareLog.skip != 0 {
			t.Fatalf("round %d without a log: from the log %v, skip %d", round, c.shareLog.fromLog, c.shareLog.skip)
		}
		wantSeries(t, shareSeries(got), map[string]float64{
			lagKey("outbox_share_group_lag_messages", e.n("s0"), topic):    10,
			lagKey("outbox_share_group_lag_seconds", e.n("s0"), topic):     now.Sub(kafkaBase.Add(3 * time.Second)).Seconds(),
			lagKey("outbox_share_group_members", e.n("s0"), ""):            0,
			"outbox_share_group_info{group=" + e.n("s0") + ",state=Empty}": 1,
		}, 0.001)
	}
	if r, err := adm.CreateTopic(kafkaCtx(t), 1, 1, nil, shareStateTopic); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	v := shareValue(shareSnapshotType, 0, i32(0))
	v[1] = 1
	r := &kgo.Record{Topic: shareStateTopic, Key: shareKey(shareSnapshotType, e.n("s0"), 1, 0), Value: v}
	if err := cl.ProduceSync(kafkaCtx(t), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	before := viaRequests(t, k, now)
	// A new collector: a client answers a topic's metadata from its
	// cache for a few seconds.
	c = newKafka(t, k)
	c.now = func() time.Time { return now }
	got, err := scrape(t, c, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c.shareLog.fromLog || c.shareLog.skip != shareLogRetry || c.shareLog.store != nil {
		t.Fatalf("unknown record: from the log %v, skip %d, store kept %v", c.shareLog.fromLog, c.shareLog.skip, c.shareLog.store != nil)
	}
	if g, w := fmt.Sprint(shareSeries(got)), fmt.Sprint(before); g != w {
		t.Fatalf("after the unknown record\n%s\nthe broker's\n%s", g, w)
	}
	if _, err := scrape(t, c, 20*time.Second); err != nil || c.shareLog.skip != shareLogRetry-1 {
		t.Fatalf("next collection: err %v, skip %d; want the log left alone", err, c.shareLog.skip)
	}
}
