package kafka

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// TestKafkaCommitBelowLogStart: retention (DeleteRecords here) deletes
// records a group had not consumed. The lost count says how many; the
// time lag is the age of the oldest retained record, where the group will
// resume; and a second deletion is seen at once although the commit did
// not move (the probe cache does not outlive retention). On Apache Kafka
// a fetch at the deleted commit answers OFFSET_OUT_OF_RANGE with -1 for
// every watermark, which used to read as "caught up".
func TestKafkaCommitBelowLogStart(t *testing.T) {
	onBoth(t, 1, func(t *testing.T, e kenv) {
		g, topic := e.n("lagging"), e.n("events")
		k := kafkaCfg(e.Brokers(), g)
		cl, adm := kafkaAdmin(t, k)
		seedTopic(t, cl, adm, topic, 2, 10)
		commit(t, adm, g, topic, map[int32]int64{0: 2, 1: 8})
		deleteTo := func(at int64) {
			t.Helper()
			del := kadm.Offsets{}
			del.Add(kadm.Offset{Topic: topic, Partition: 0, At: at})
			r, err := adm.DeleteRecords(kafkaCtx(t), del)
			if err == nil {
				err = r.Error()
			}
			if err != nil {
				t.Fatalf("delete records: %v", err)
			}
		}
		deleteTo(5)
		c := newKafka(t, k)
		now := kafkaBase.Add(time.Hour)
		c.now = func() time.Time { return now }
		secs := func(offset int) float64 { return now.Sub(kafkaBase.Add(time.Duration(offset) * time.Second)).Seconds() }
		got, err := scrape(t, c, 10*time.Second)
		if err != nil {
			t.Fatalf("Update: %v", err)
		}
		wantSeries(t, got, map[string]float64{
			lagKey("outbox_consumer_lag_messages", g, topic):            8 + 2,
			lagKey("outbox_consumer_retention_lost_messages", g, topic): 3,
			lagKey("outbox_consumer_lag_seconds", g, topic):             secs(5),
		}, 0.001)

		deleteTo(7)
		got, err = scrape(t, c, 10*time.Second)
		if err != nil {
			t.Fatalf("Update: %v", err)
		}
		wantSeries(t, got, map[string]float64{
			lagKey("outbox_consumer_retention_lost_messages", g, topic): 5,
			lagKey("outbox_consumer_lag_seconds", g, topic):             secs(7),
		}, 0.001)
	})
}

// TestKafkaRetentionMsDeletesUnconsumed is the consumer offline past the
// broker's retention, by the broker's own
// retention.ms, which kfake does not run: old segments go, the log start
// moves past the commit, and the collector reports the loss.
func TestKafkaRetentionMsDeletesUnconsumed(t *testing.T) {
	e := realEnv(t)
	g, topic := e.n("offline"), e.n("events")
	k := kafkaCfg(e.Brokers(), g)
	cl, adm := kafkaAdmin(t, k)
	ctx := kafkaCtx(t)
	// segment.ms rolls a segment when a batch's timestamp is that far
	// past the segment's first: every old record gets its own segment.
	ms := func(d time.Duration) *string { s := fmt.Sprint(d.Milliseconds()); return &s }
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": ms(24 * time.Hour), "segment.ms": ms(time.Second)}, topic); err != nil {
		t.Fatal(err)
	}
	fresh := time.Now().Truncate(time.Millisecond)
	for i := 0; i < 10; i++ {
		ts := kafkaBase.Add(time.Duration(i) * 10 * time.Second) // months old: past retention
		if i >= 5 {
			ts = fresh.Add(time.Duration(i-5) * 10 * time.Second)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v"), Timestamp: ts}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	commit(t, adm, g, topic, map[int32]int64{0: 1})
	// The broker checks retention every 500 ms (kafkatest): wait for it.
	for {
		starts, err := adm.ListStartOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := starts.Lookup(topic, 0); o.Offset == 5 {
			break
		} else if o.Offset > 5 {
			t.Fatalf("retention deleted fresh records: log start %d", o.Offset)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("retention.ms never deleted the old segments: %v", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	got := scrapeAt(t, k, fresh.Add(time.Minute))
	wantSeries(t, got, map[string]float64{
		lagKey("outbox_consumer_lag_messages", g, topic):            9,
		lagKey("outbox_consumer_retention_lost_messages", g, topic): 4,
		lagKey("outbox_consumer_lag_seconds", g, topic):             60,
	}, 0.001)
}

// TestKafkaOutOfRangeFetchIsNotCaughtUp folds Apache Kafka's answer to a
// fetch below the log start (the race where retention moves it between
// ListOffsets and Fetch): OFFSET_OUT_OF_RANGE with -1 high watermark,
// last stable offset and log start. It must be an error, never a probe
// that reads as caught up.
func TestKafkaOutOfRangeFetchIsNotCaughtUp(t *testing.T) {
	out := answers{probes: make([]Probe, 1), ok: make([]bool, 1)}
	s := &partState{topic: "t", part: 0, cursor: 2, pending: []ask{{off: 2, idx: 0}}, stable: -1}
	rp := kmsg.NewFetchResponseTopicPartition()
	rp.ErrorCode = 1 // OFFSET_OUT_OF_RANGE
	rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
	fold(s, &rp, out)
	if out.ok[0] {
		t.Fatalf("answered %+v from an out-of-range fetch with no watermarks", out.probes[0])
	}
	if s.err == nil || !strings.Contains(s.err.Error(), "OFFSET_OUT_OF_RANGE") {
		t.Fatalf("want an OFFSET_OUT_OF_RANGE error, got %v", s.err)
	}
	// kfake's shape of the same answer names the log start: carried there.
	s = &partState{topic: "t", part: 0, cursor: 2, pending: []ask{{off: 2, idx: 0}}, stable: -1}
	rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = 10, 10, 5
	fold(s, &rp, out)
	if s.err != nil || s.cursor != 5 || len(s.carried) != 1 {
		t.Fatalf("kfake shape: err %v cursor %d carried %v", s.err, s.cursor, s.carried)
	}
}

// TestKafkaAbortedRunKeepsCursor: a run of aborted transactions after the
// commit longer than one scrape's read bound. Each scrape reads at most
// maxRounds fetches and goes on where the last stopped, until it reaches
// the first committed record; before that the time lag is absent and the
// collection says it is partial.
func TestKafkaAbortedRunKeepsCursor(t *testing.T) {
	onBoth(t, 1, func(t *testing.T, e kenv) {
		g, topic := e.n("reader"), e.n("aborted")
		k := kafkaCfg(e.Brokers(), g)
		_, adm := kafkaAdmin(t, k)
		ctx := kafkaCtx(t)
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
		p, err := kafkaclient.New(k, kgo.TransactionalID(e.n("tx")), kgo.DefaultProduceTopic(topic),
			kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(1<<20))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		// 30 aborted transactions of one 250 KiB record each: about one
		// per fetch round (partitionBytes is 256 KiB), so more than two
		// scrapes' worth.
		big := bytes.Repeat([]byte("x"), 250<<10)
		const aborted = 30
		for i := 0; i <= aborted; i++ {
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			v, end := big, kgo.TryAbort
			if i == aborted {
				v, end = []byte("data"), kgo.TryCommit
			}
			if err := p.ProduceSync(ctx, &kgo.Record{Value: v, Timestamp: kafkaBase.Add(time.Duration(i) * time.Second)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if err := p.EndTransaction(ctx, end); err != nil {
				t.Fatal(err)
			}
		}
		commit(t, adm, g, topic, map[int32]int64{0: 0})
		c := newKafka(t, k)
		now := kafkaBase.Add(time.Hour)
		c.now = func() time.Time { return now }
		key := lagKey("outbox_consumer_lag_seconds", g, topic)
		var scrapes int
		for scrapes = 1; scrapes <= 8; scrapes++ {
			before := c.prober.Fetches()
			got, err := scrape(t, c, 20*time.Second)
			if n := c.prober.Fetches() - before; n > maxRounds {
				t.Fatalf("scrape %d sent %d fetches; the bound is %d", scrapes, n, maxRounds)
			}
			if v, ok := got[key]; ok {
				if err != nil {
					t.Fatalf("settled scrape %d: %v", scrapes, err)
				}
				if want := now.Sub(kafkaBase.Add(aborted * time.Second)).Seconds(); v != want {
					t.Fatalf("time lag %v, want %v (the committed record after the run)", v, want)
				}
				break
			}
			if err == nil || !strings.Contains(err.Error(), "lower bound") {
				t.Fatalf("scrape %d: no time lag and no partial error (%v)", scrapes, err)
			}
		}
		if scrapes > 8 {
			t.Fatal("the time lag never appeared: each scrape starts again at the commit")
		}
		if scrapes < 2 {
			t.Fatalf("settled in one scrape: the run is too short to test the bound")
		}
		t.Logf("settled in %d scrapes, %d fetches", scrapes, c.prober.Fetches())
	})
}

// TestKafkaLeaderChangeDuringScrape moves a partition to the other broker
// while the collector fetches from it (a rolling restart): the old leader
// answers NOT_LEADER_OR_FOLLOWER, the collector reads metadata again and
// gets the record from the new leader in the same scrape. kfake moves a
// leader in the middle of one scrape on demand; the Apache Kafka version
// of the case (TestKafkaLeaderChangeOnApacheKafka) moves it between the
// metadata and the read.
func TestKafkaLeaderChangeDuringScrape(t *testing.T) {
	kc, k, _, adm := seeded(t, 2, "g", 1)
	commit(t, adm, "g", "events", map[int32]int64{0: 3})
	from := kc.LeaderFor("events", 0)
	to := int32(0)
	if from == 0 {
		to = 1
	}
	var moved atomic.Bool
	kc.ControlKey(kmsg.Fetch.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		// Not the collector's empty warm-up fetch: the first one that
		// reads the partition.
		if len(kr.(*kmsg.FetchRequest).Topics) > 0 && moved.CompareAndSwap(false, true) {
			kc.SleepControl(func() {
				if err := kc.MoveTopicPartition("events", 0, to); err != nil {
					t.Errorf("move: %v", err)
				}
			})
		}
		return nil, nil, false // kfake answers: NOT_LEADER after the move
	})
	c := newKafka(t, k)
	now := kafkaBase.Add(time.Hour)
	c.now = func() time.Time { return now }
	got, err := scrape(t, c, 10*time.Second)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if !moved.Load() || kc.LeaderFor("events", 0) != to {
		t.Fatal("the leader did not move: the test tests nothing")
	}
	if f := c.prober.Fetches(); f < 2 {
		t.Fatalf("%d fetches: the read was not retried at the new leader", f)
	}
	wantSeries(t, got, map[string]float64{
		lagKey("outbox_consumer_lag_seconds", "g", "events"): now.Sub(kafkaBase.Add(3 * time.Second)).Seconds(),
	}, 0.001)
}

// TestKafkaJavaConsumerGroups: groups made by Kafka's own Java consumer
// (kafka-console-consumer), one classic and one KIP-848
// (group.protocol=consumer), each committing where it stopped; then
// records are appended. Real broker only: these are Kafka's clients and
// group coordinator, the answers kfake imitates.
func TestKafkaJavaConsumerGroups(t *testing.T) {
	e := realEnv(t)
	b := kafkatest.Shared(t)
	topic := e.n("events")
	k := kafkaCfg(e.Brokers(), e.pat("/.*/"))
	cl, adm := kafkaAdmin(t, k)
	seedTopic(t, cl, adm, topic, 2, 5)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for _, proto := range []string{"classic", "consumer"} {
		if _, err := b.Consume(ctx, kafkatest.ConsoleConsumer{Topic: topic, Group: e.n(proto), Protocol: proto, Messages: 10, FromBeginning: true}); err != nil {
			t.Fatal(err)
		}
	}
	// Three more on partition 0, the first 1 minute after the seed.
	for i := 1; i <= 3; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("v"), Timestamp: kafkaBase.Add(time.Duration(i) * time.Minute)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	now := kafkaBase.Add(time.Hour)
	got := scrapeAt(t, k, now)
	want := map[string]float64{}
	for _, proto := range []string{"classic", "consumer"} {
		g := e.n(proto)
		want[lagKey("outbox_consumer_lag_messages", g, topic)] = 3
		want[lagKey("outbox_consumer_lag_seconds", g, topic)] = now.Sub(kafkaBase.Add(time.Minute)).Seconds()
		want[lagKey("outbox_consumer_retention_lost_messages", g, topic)] = 0
		want[lagKey("outbox_consumer_group_members", g, "")] = 0
		want[lagKey("outbox_consumer_deadline_seconds", g, "")] = 600
		want["outbox_consumer_group_info{group="+g+",protocol="+proto+",state=Empty}"] = 1
	}
	wantSeries(t, got, want, 0.001)
	if len(got) != len(want) {
		t.Errorf("got series %v, want exactly %v", keys(got), keys(want))
	}
}

// TestKafkaCompactedCommit: compaction removed the record at the commit
// (a newer record has its key). Apache Kafka's cleaner does it, kfake
// does not. The log start does not move, nothing is lost in the sense of
// outbox_consumer_retention_lost_messages (the newer value of every key is still there), and the time lag
// is the age of the first record that survived after the commit.
func TestKafkaCompactedCommit(t *testing.T) {
	e := realEnv(t)
	g, topic := e.n("compacted"), e.n("events")
	k := kafkaCfg(e.Brokers(), g)
	cl, adm := kafkaAdmin(t, k)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	str := func(s string) *string { return &s }
	cfg := map[string]*string{"cleanup.policy": str("compact"), "segment.ms": str("1000"),
		"min.cleanable.dirty.ratio": str("0.01"), "min.compaction.lag.ms": str("0")}
	if _, err := adm.CreateTopic(ctx, 1, 1, cfg, topic); err != nil {
		t.Fatal(err)
	}
	// Offsets 0-4 keys k0-k4, 5-9 the same keys again, 10 a tail that
	// closes the segments holding the rest (the active one is never
	// cleaned). One batch each, 10 s apart: a segment per record.
	for i := 0; i <= 10; i++ {
		key := fmt.Sprintf("k%d", i%5)
		if i == 10 {
			key = "tail"
		}
		r := &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte("v"), Timestamp: kafkaBase.Add(time.Duration(i) * 10 * time.Second)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	commit(t, adm, g, topic, map[int32]int64{0: 2})
	// Wait for the cleaner: the first record at or after 2 becomes 5.
	rcl, _ := kafkaAdmin(t, k)
	p := NewProber(rcl)
	for {
		probes, ok, err := p.Read(ctx, metadata(t, adm, topic), []Want{{topic, 0, 2}})
		if err == nil && ok[0] && probes[0].Found && probes[0].Offset == 5 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the cleaner never compacted offsets 2-4 (last %+v, %v)", probes, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	now := kafkaBase.Add(time.Hour)
	got := scrapeAt(t, k, now)
	wantSeries(t, got, map[string]float64{
		lagKey("outbox_consumer_lag_messages", g, topic):            11 - 2,
		lagKey("outbox_consumer_retention_lost_messages", g, topic): 0,
		lagKey("outbox_consumer_lag_seconds", g, topic):             now.Sub(kafkaBase.Add(50 * time.Second)).Seconds(),
	}, 0.001)
}

// TestKafkaLeaderChangeOnApacheKafka: the partition moves to the other
// node of a two-node Apache Kafka cluster (a reassignment, as when a
// broker is drained for a rolling restart). Reading with the metadata
// from before the move, the old leader answers NOT_LEADER_OR_FOLLOWER in
// Kafka's own shape; the prober reads metadata again and gets the record
// from the new leader in the same Read. (A follower that still holds the
// replica serves the fetch itself, up to its high watermark: Kafka lets
// consumers fetch from followers since KIP-392, so only a broker that no
// longer holds the partition refuses.) Its own cluster: the second JVM
// costs CI a few seconds for this one case.
func TestKafkaLeaderChangeOnApacheKafka(t *testing.T) {
	b, err := kafkatest.Start(kafkatest.Options{Nodes: 2, Heap: "384m", JVM: kafkatest.QuickJVM})
	if err != nil {
		t.Fatalf("two-node Apache Kafka: %v", err)
	}
	t.Cleanup(b.Stop)
	k := kafkaCfg(b.Brokers(), "g")
	cl, adm := kafkaAdmin(t, k)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "events"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "events", Value: []byte("v"), Timestamp: kafkaBase.Add(time.Duration(i) * time.Second)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	commit(t, adm, "g", "events", map[int32]int64{0: 3})
	before := metadata(t, adm, "events")
	old := before["events"].Partitions[0].Leader
	to := int32(1)
	if old == 1 {
		to = 2
	}
	req := kadm.AlterPartitionAssignmentsReq{}
	req.Assign("events", 0, []int32{to})
	if _, err := adm.AlterPartitionAssignments(ctx, req); err != nil {
		t.Fatalf("reassign: %v", err)
	}
	// Until a fresh client sees the move done (kgo caches metadata).
	for {
		fcl, fadm := kafkaAdmin(t, k)
		now := metadata(t, fadm, "events")["events"].Partitions[0]
		fcl.Close()
		if now.Leader == to && len(now.Replicas) == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("partition still at %+v, want only %d", now, to)
		case <-time.After(200 * time.Millisecond):
		}
	}
	rcl, _ := kafkaAdmin(t, k)
	p := NewProber(rcl)
	probes, ok, err := p.Read(ctx, before, []Want{{"events", 0, 3}})
	if err != nil {
		t.Fatalf("Read across the leader change: %v", err)
	}
	if !ok[0] || !probes[0].Found || probes[0].Offset != 3 {
		t.Fatalf("probe %+v (answered %v); want the record at 3", probes[0], ok[0])
	}
	if p.Fetches() < 2 {
		t.Fatalf("%d fetches: the stale leader was not asked, the test tests nothing", p.Fetches())
	}
	// And a whole collection on the moved partition.
	c := newKafka(t, k)
	now := kafkaBase.Add(time.Hour)
	c.now = func() time.Time { return now }
	got, err := scrape(t, c, 20*time.Second)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	wantSeries(t, got, map[string]float64{
		lagKey("outbox_consumer_lag_seconds", "g", "events"): now.Sub(kafkaBase.Add(3 * time.Second)).Seconds(),
	}, 0.001)
}
