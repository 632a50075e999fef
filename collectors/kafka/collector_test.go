package kafka

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// kafkaBase is the timestamp of offset 0 in the seeded partitions; record
// i is written at kafkaBase + i seconds. Millisecond precision, as Collector
// stores it.
var kafkaBase = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func kafkaCfg(brokers []string, groups ...string) *config.Kafka {
	return &config.Kafka{
		Brokers:   brokers,
		Groups:    groups,
		Deadline:  10 * time.Minute,
		Deadlines: map[string]time.Duration{"search-index": 2 * time.Minute},
	}
}

// kafkaAdmin returns a client and admin client for seeding the cluster.
func kafkaAdmin(t *testing.T, k *config.Kafka, opts ...kgo.Opt) (*kgo.Client, *kadm.Client) {
	t.Helper()
	cl, err := kafkaclient.New(k, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, kadm.NewClient(cl)
}

func kafkaCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// seedTopic creates topic with parts partitions and writes n records to
// each, record i timestamped kafkaBase + i seconds.
// seeded starts a kfake cluster of brokers nodes for group, with topic
// events of parts partitions of ten records each, and returns it with
// its config and the seeding clients.
func seeded(t *testing.T, brokers int, group string, parts int32) (*kafkatest.Cluster, *config.Kafka, *kgo.Client, *kadm.Client) {
	t.Helper()
	kc := kafkatest.New(t, brokers)
	k := kafkaCfg(kc.Brokers(), group)
	cl, adm := kafkaAdmin(t, k)
	seedTopic(t, cl, adm, "events", parts, 10)
	return kc, k, cl, adm
}

func seedTopic(t *testing.T, cl *kgo.Client, adm *kadm.Client, topic string, parts int32, n int) {
	t.Helper()
	ctx := kafkaCtx(t)
	if _, err := adm.CreateTopic(ctx, parts, 1, nil, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	var rs []*kgo.Record
	for p := int32(0); p < parts; p++ {
		for i := 0; i < n; i++ {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: p, Value: []byte("v"), Timestamp: kafkaBase.Add(time.Duration(i) * time.Second)})
		}
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

func commit(t *testing.T, adm *kadm.Client, group string, topic string, at map[int32]int64) {
	t.Helper()
	os := kadm.Offsets{}
	for p, o := range at {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1})
	}
	if err := adm.CommitAllOffsets(kafkaCtx(t), group, os); err != nil {
		t.Fatalf("commit %s: %v", group, err)
	}
}

// scrape runs one Update and returns its series as "name{label values}"
// -> value, and its error.
// scrapeAt collects once with a new collector of k whose clock reads now,
// and fails the test if the collection fails.
func scrapeAt(t *testing.T, k *config.Kafka, now time.Time) map[string]float64 {
	t.Helper()
	_, got := scrapedAt(t, k, now)
	return got
}

// scrapedAt is scrapeAt that also returns the collector, for what it
// kept.
func scrapedAt(t *testing.T, k *config.Kafka, now time.Time) (*Collector, map[string]float64) {
	t.Helper()
	c := newKafka(t, k)
	c.now = func() time.Time { return now }
	got, err := scrape(t, c, 10*time.Second)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	return c, got
}

func scrape(t *testing.T, c *Collector, timeout time.Duration) (map[string]float64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	ch := make(chan prometheus.Metric, 1024)
	err := c.Update(ctx, ch)
	close(ch)
	out := map[string]float64{}
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		var ls []string
		for _, l := range pb.Label {
			if l.GetName() == "cluster" {
				if l.GetValue() != c.Target() {
					t.Fatalf("cluster label %q, want %q", l.GetValue(), c.Target())
				}
				continue
			}
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		name := m.Desc().String()
		name = name[strings.Index(name, `fqName: "`)+9:]
		name = name[:strings.Index(name, `"`)]
		v := pb.GetGauge().GetValue()
		if math.IsNaN(v) || v < 0 {
			t.Fatalf("%s{%s} = %v: never NaN or negative", name, strings.Join(ls, ","), v)
		}
		key := name + "{" + strings.Join(ls, ",") + "}"
		if _, dup := out[key]; dup {
			t.Fatalf("series %s sent twice", key)
		}
		out[key] = v
	}
	return out, err
}

func newKafka(t *testing.T, k *config.Kafka) *Collector {
	t.Helper()
	c, err := NewCollector("main", k, testutil.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if c.Name() != "kafka" || c.Target() != "main" {
		t.Fatalf("Name/Target = %q/%q", c.Name(), c.Target())
	}
	return c
}

func wantSeries(t *testing.T, got map[string]float64, want map[string]float64, tolerance float64) {
	t.Helper()
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("missing %s (have %v)", k, keys(got))
			continue
		}
		if math.Abs(g-v) > tolerance {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
}

func keys(m map[string]float64) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func lagKey(metric, group, topic string) string {
	if topic == "" {
		return fmt.Sprintf("%s{group=%s}", metric, group)
	}
	return fmt.Sprintf("%s{group=%s,topic=%s}", metric, group, topic)
}

// TestKafkaLagExact seeds known offsets and timestamps and checks the
// offset lag exactly and the time lag to the millisecond, with the
// partition kinds that matter: behind, caught up, never committed (from
// the log start, moved by DeleteRecords), and filters on groups and
// topics.
func TestKafkaLagExact(t *testing.T) {
	for _, rule := range []string{"", config.UncommittedLogStart} {
		t.Run("uncommitted="+rule, func(t *testing.T) {
			onBoth(t, 3, func(t *testing.T, e kenv) { lagExact(t, e, rule) })
		})
	}
}

func lagExact(t *testing.T, e kenv, rule string) {
	k := kafkaCfg(e.Brokers(), e.pat("search-index"), e.pat("/notify-.*/"))
	k.Deadlines = map[string]time.Duration{e.n("search-index"): 2 * time.Minute}
	k.Topics = []string{e.pat("events"), e.pat("/ev-.*/")}
	k.Uncommitted = rule
	// Per-partition series with the default rule: the uncommitted
	// partition has none.
	k.PerPartition = rule == ""
	cl, adm := kafkaAdmin(t, k)
	events, ev2, audit := e.n("events"), e.n("ev-2"), e.n("audit")
	seedTopic(t, cl, adm, events, 3, 10)
	seedTopic(t, cl, adm, ev2, 1, 5)
	seedTopic(t, cl, adm, audit, 1, 5)
	// Partition 2 keeps offsets 3..9: its log starts at 3.
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: events, Partition: 2, At: 3})
	if _, err := adm.DeleteRecords(kafkaCtx(t), del); err != nil {
		t.Fatalf("delete records: %v", err)
	}
	si, ne := e.n("search-index"), e.n("notify-email")
	commit(t, adm, si, events, map[int32]int64{0: 4, 1: 10}) // p2 never committed
	commit(t, adm, si, ev2, map[int32]int64{0: 5})
	commit(t, adm, si, audit, map[int32]int64{0: 0}) // filtered out by topics
	commit(t, adm, ne, events, map[int32]int64{0: 9, 1: 9, 2: 9})
	commit(t, adm, e.n("notifyx"), events, map[int32]int64{0: 0}) // regex is anchored: not "notify-"
	commit(t, adm, e.n("other"), events, map[int32]int64{0: 0})

	now := kafkaBase.Add(time.Hour)
	got := scrapeAt(t, k, now)
	secs := func(offset int) float64 { return now.Sub(kafkaBase.Add(time.Duration(offset) * time.Second)).Seconds() }
	// p0: 10-4, p1: 0; p2 (uncommitted) counts only by rule, 10-3 from
	// the log start. Oldest unconsumed: p0 at 4, or p2 at its log start 3.
	siMsgs, siSecs := 6.0, secs(4)
	if rule == config.UncommittedLogStart {
		siMsgs, siSecs = 6+7, secs(3)
	}
	want := map[string]float64{
		lagKey("outbox_consumer_lag_messages", si, events):                          siMsgs,
		lagKey("outbox_consumer_lag_seconds", si, events):                           siSecs,
		lagKey("outbox_consumer_retention_lost_messages", si, events):               0,
		lagKey("outbox_consumer_uncommitted_partitions", si, events):                1, // p2
		lagKey("outbox_consumer_uncommitted_partitions", si, ev2):                   0,
		lagKey("outbox_consumer_uncommitted_partitions", ne, events):                0,
		lagKey("outbox_consumer_lag_messages", si, ev2):                             0,
		lagKey("outbox_consumer_lag_seconds", si, ev2):                              0,
		lagKey("outbox_consumer_retention_lost_messages", si, ev2):                  0,
		lagKey("outbox_consumer_deadline_seconds", si, ""):                          120,
		lagKey("outbox_consumer_group_members", si, ""):                             0,
		lagKey("outbox_consumer_lag_messages", ne, events):                          3,
		lagKey("outbox_consumer_lag_seconds", ne, events):                           secs(9),
		lagKey("outbox_consumer_retention_lost_messages", ne, events):               0,
		lagKey("outbox_consumer_deadline_seconds", ne, ""):                          600,
		lagKey("outbox_consumer_group_members", ne, ""):                             0,
		"outbox_consumer_group_info{group=" + si + ",protocol=classic,state=Empty}": 1,
		"outbox_consumer_group_info{group=" + ne + ",protocol=classic,state=Empty}": 1,
	}
	if k.PerPartition {
		part := func(metric, g, topic string, p int, v float64) {
			want[fmt.Sprintf("outbox_consumer_partition_lag_%s{group=%s,partition=%d,topic=%s}", metric, g, p, topic)] = v
		}
		part("messages", si, events, 0, 6)
		part("seconds", si, events, 0, secs(4))
		part("messages", si, events, 1, 0)
		part("seconds", si, events, 1, 0)
		part("messages", si, ev2, 0, 0)
		part("seconds", si, ev2, 0, 0)
		for p := 0; p < 3; p++ {
			part("messages", ne, events, p, 1)
			part("seconds", ne, events, p, secs(9))
		}
	}
	wantSeries(t, got, want, 0.001)
	if len(got) != len(want) {
		t.Errorf("got series %v, want exactly %v", keys(got), keys(map[string]float64(want)))
	}
}

// TestKafkaCacheReadsOnlyMovedCommits shows the time lag costs a Fetch
// only when a commit moved: a second scrape with no commit moved sends
// none, and moving one commit reads again.
func TestKafkaCacheReadsOnlyMovedCommits(t *testing.T) { onBoth(t, 2, cacheReadsOnlyMovedCommits) }

func cacheReadsOnlyMovedCommits(t *testing.T, e kenv) {
	k := kafkaCfg(e.Brokers(), e.pat("/g.*/"))
	cl, adm := kafkaAdmin(t, k)
	seedTopic(t, cl, adm, e.n("events"), 4, 20)
	for i := 0; i < 5; i++ {
		commit(t, adm, e.n(fmt.Sprintf("g%d", i)), e.n("events"), map[int32]int64{0: int64(i), 1: int64(i + 1), 2: int64(i + 2), 3: int64(i + 3)})
	}
	c := newKafka(t, k)
	now := kafkaBase.Add(time.Hour)
	c.now = func() time.Time { return now }
	first, err := scrape(t, c, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	f1 := c.prober.Fetches()
	if f1 == 0 || f1 > 4 {
		t.Fatalf("first scrape sent %d fetches; want 1 or 2 per broker (batched)", f1)
	}
	second, err := scrape(t, c, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if f := c.prober.Fetches(); f != f1 {
		t.Fatalf("steady state sent %d more fetches; want none", f-f1)
	}
	if fmt.Sprint(first) != fmt.Sprint(second) {
		t.Fatalf("cached scrape differs:\n%v\n%v", first, second)
	}
	commit(t, adm, e.n("g0"), e.n("events"), map[int32]int64{0: 15})
	third, err := scrape(t, c, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if f := c.prober.Fetches(); f == f1 {
		t.Fatal("a moved commit must be read")
	}
	// g0: p0 now at 15, p1 at 1 is still the oldest.
	wantSeries(t, third, map[string]float64{
		lagKey("outbox_consumer_lag_messages", e.n("g0"), e.n("events")): 5 + 19 + 18 + 17,
		lagKey("outbox_consumer_lag_seconds", e.n("g0"), e.n("events")):  now.Sub(kafkaBase.Add(time.Second)).Seconds(),
	}, 0.001)
}

// TestKafkaEmptyGroupKeepsLagDeletedGroupGoes runs a real group member:
// while it consumes the group has one member; when it leaves the group is
// Empty, has 0 members and keeps its lag series; once the group is
// deleted its series go.
func TestKafkaEmptyGroupKeepsLagDeletedGroupGoes(t *testing.T) {
	_, k, _, adm := seeded(t, 1, "search-index", 2)

	consumer, err := kafkaclient.New(k, kgo.ConsumerGroup("search-index"), kgo.ConsumeTopics("events"),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := kafkaCtx(t)
	seen := 0
	for seen < 20 {
		fs := consumer.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("poll: %v", err)
		}
		seen += fs.NumRecords()
	}
	// Commit 6 on each partition: 4 behind on each.
	commitAt := map[string]map[int32]kgo.EpochOffset{"events": {0: {Epoch: -1, Offset: 6}, 1: {Epoch: -1, Offset: 6}}}
	consumer.CommitOffsetsSync(ctx, commitAt, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			t.Errorf("commit: %v", err)
		}
	})

	c := newKafka(t, k)
	got, err := scrape(t, c, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wantSeries(t, got, map[string]float64{
		lagKey("outbox_consumer_group_members", "search-index", ""):      1,
		lagKey("outbox_consumer_lag_messages", "search-index", "events"): 8,
	}, 0)

	consumer.Close() // leaves the group
	got, err = scrape(t, c, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wantSeries(t, got, map[string]float64{
		lagKey("outbox_consumer_group_members", "search-index", ""):      0,
		lagKey("outbox_consumer_lag_messages", "search-index", "events"): 8,
	}, 0)
	if _, ok := got[lagKey("outbox_consumer_lag_seconds", "search-index", "events")]; !ok {
		t.Fatal("an empty group keeps its time lag")
	}

	if _, err := adm.DeleteGroup(kafkaCtx(t), "search-index"); err != nil {
		t.Fatalf("delete group: %v", err)
	}
	got, err = scrape(t, c, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("a deleted group's series must go; got %v", keys(got))
	}
}

// TestKafkaConsumerProtocolGroup runs a KIP-848 (consumer protocol) group
// of franz-go members, on kfake and on Apache Kafka. Its members count
// only because the collector describes consumer-type groups with
// ConsumerGroupDescribe: kfake answers a classic DescribeGroups for such
// a group with an empty member list, Kafka 4.x with GROUP_ID_NOT_FOUND
// (a Dead group), so a classic-only describe would report 0. Not shown
// here: a group mid-migration from classic with members of both kinds,
// and brokers before 3.8 that list no group type at all (covered by
// lag.SelectGroups' table test).
func TestKafkaConsumerProtocolGroup(t *testing.T) { onBoth(t, 1, consumerProtocolGroup) }

func consumerProtocolGroup(t *testing.T, e kenv) {
	notify, events := e.n("notify"), e.n("events")
	k := kafkaCfg(e.Brokers(), notify)
	cl, adm := kafkaAdmin(t, k)
	seedTopic(t, cl, adm, events, 2, 10)

	consumer, err := kafkaclient.New(k, kgo.ConsumerGroup(notify), kgo.ServerSideBalancer(), kgo.ConsumeTopics(events),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(consumer.Close)
	ctx := kafkaCtx(t)
	seen := 0
	for seen < 20 {
		fs := consumer.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("poll: %v", err)
		}
		seen += fs.NumRecords()
	}
	if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if typ := listed[notify].GroupType; typ != "consumer" {
		t.Fatalf("group type %q: the test needs a KIP-848 group", typ)
	}
	// Classic DescribeGroups does not describe a KIP-848 group: Kafka
	// answers GROUP_ID_NOT_FOUND or a Dead group, kfake an empty member
	// list. Either way a classic-only describe would report 0 members.
	if d, err := adm.DescribeGroups(ctx, notify); err == nil {
		t.Logf("classic describe of a KIP-848 group: state %q, %d members, err %v", d[notify].State, len(d[notify].Members), d[notify].Err)
	}

	// Two records more: lag 2 on partition 0.
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: events, Partition: 0, Value: []byte("v"), Timestamp: kafkaBase.Add(time.Minute)},
		&kgo.Record{Topic: events, Partition: 0, Value: []byte("v"), Timestamp: kafkaBase.Add(2 * time.Minute)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c := newKafka(t, k)
	now := kafkaBase.Add(time.Hour)
	c.now = func() time.Time { return now }
	got, err := scrape(t, c, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wantSeries(t, got, map[string]float64{
		lagKey("outbox_consumer_group_members", notify, ""):    1,
		lagKey("outbox_consumer_lag_messages", notify, events): 2,
		lagKey("outbox_consumer_lag_seconds", notify, events):  now.Sub(kafkaBase.Add(time.Minute)).Seconds(),
	}, 0.001)
}

// TestKafkaTransactionsCaughtUp: a read_committed consumer that has read
// everything stays short of the high watermark by the commit marker: its
// offset lag counts the marker (as Kafka's LAG does), its time lag is 0;
// with an aborted transaction after it, only markers and aborted records
// remain: 5 records by offset, 0 seconds (Burrow #570). An
// open transaction is not yet readable: 0 seconds, its records counted.
func TestKafkaTransactionsCaughtUp(t *testing.T) { onBoth(t, 1, transactionsCaughtUp) }

func transactionsCaughtUp(t *testing.T, e kenv) {
	k := kafkaCfg(e.Brokers(), e.pat("/.*/"))
	_, adm := kafkaAdmin(t, k)
	ctx := kafkaCtx(t)
	for _, topic := range []string{"committed", "aborted", "open"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, e.n(topic)); err != nil {
			t.Fatal(err)
		}
	}
	txn := func(topic string, n int, end kgo.TransactionEndTry) {
		t.Helper()
		p, err := kafkaclient.New(k, kgo.TransactionalID(e.n("tx-"+topic+fmt.Sprint(end))), kgo.DefaultProduceTopic(e.n(topic)))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var last int64
		for i := 0; i < n; i++ {
			r := &kgo.Record{Value: []byte("v"), Timestamp: kafkaBase.Add(time.Duration(i) * time.Second)}
			if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
			last = r.Offset
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if topic == "open" && end == kgo.TryCommit {
			t.Cleanup(p.Close) // left open
			return
		}
		if err := p.EndTransaction(ctx, end); err != nil {
			t.Fatal(err)
		}
		p.Close()
		// The marker is written after EndTransaction returns: the next
		// transaction's records must come after it.
		waitEnd(t, adm, e.n(topic), last+2)
	}
	txn("committed", 5, kgo.TryCommit) // 0-4 data, 5 marker: HWM 6
	txn("aborted", 5, kgo.TryCommit)   // 0-4 data, 5 marker
	txn("aborted", 3, kgo.TryAbort)    // 6-8 aborted, 9 marker: HWM 10
	txn("open", 2, kgo.TryAbort)       // 0-1 aborted, 2 marker
	txn("open", 3, kgo.TryCommit)      // 3-5 in an open transaction: LSO 3, HWM 6

	// The transaction coordinator writes the markers after EndTransaction
	// returns: wait for them, within the context's deadline.
	waitHighWatermarks(ctx, t, adm, e, map[string]int64{"committed": 6, "aborted": 10, "open": 6})
	commit(t, adm, e.n("reader"), e.n("committed"), map[int32]int64{0: 5})
	commit(t, adm, e.n("reader"), e.n("aborted"), map[int32]int64{0: 5})
	commit(t, adm, e.n("reader"), e.n("open"), map[int32]int64{0: 3})
	commit(t, adm, e.n("behind"), e.n("committed"), map[int32]int64{0: 2})

	c := newKafka(t, k)
	now := kafkaBase.Add(time.Hour)
	c.now = func() time.Time { return now }
	got, err := scrape(t, c, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wantSeries(t, got, map[string]float64{
		lagKey("outbox_consumer_lag_messages", e.n("reader"), e.n("committed")): 1,
		lagKey("outbox_consumer_lag_seconds", e.n("reader"), e.n("committed")):  0,
		lagKey("outbox_consumer_lag_messages", e.n("reader"), e.n("aborted")):   5,
		lagKey("outbox_consumer_lag_seconds", e.n("reader"), e.n("aborted")):    0,
		lagKey("outbox_consumer_lag_messages", e.n("reader"), e.n("open")):      3,
		lagKey("outbox_consumer_lag_seconds", e.n("reader"), e.n("open")):       0,
		lagKey("outbox_consumer_lag_messages", e.n("behind"), e.n("committed")): 4,
		lagKey("outbox_consumer_lag_seconds", e.n("behind"), e.n("committed")):  now.Sub(kafkaBase.Add(2 * time.Second)).Seconds(),
	}, 0.001)
}

// waitHighWatermarks waits, within ctx, until partition 0 of each topic
// (by its short name) has the high watermark wanted; one past it means
// the seeding is off.
func waitHighWatermarks(ctx context.Context, t *testing.T, adm *kadm.Client, e kenv, want map[string]int64) {
	t.Helper()
	for topic, w := range want {
		for {
			ends, err := adm.ListEndOffsets(ctx, e.n(topic))
			if err != nil {
				t.Fatal(err)
			}
			o, _ := ends.Lookup(e.n(topic), 0)
			if o.Offset == w {
				break
			}
			if o.Offset > w || ctx.Err() != nil {
				t.Fatalf("%s high watermark %d, want %d: seeding is off", topic, o.Offset, w)
			}
		}
	}
}

// TestKafkaSASL connects with SASL PLAIN and SCRAM; wrong credentials make
// Update fail and send nothing.
func TestKafkaSASL(t *testing.T) {
	kc := kafkatest.New(t, 1, kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "plain-user", "plain-pass"),
		kfake.Superuser("SCRAM-SHA-256", "scram-user", "scram-pass"))
	good := kafkaCfg(kc.Brokers(), "search-index")
	good.SASL = config.SASL{Mechanism: "PLAIN", Username: "plain-user", Password: "plain-pass"}
	cl, adm := kafkaAdmin(t, good)
	seedTopic(t, cl, adm, "events", 1, 10)
	commit(t, adm, "search-index", "events", map[int32]int64{0: 7})

	for _, s := range []config.SASL{
		{Mechanism: "PLAIN", Username: "plain-user", Password: "plain-pass"},
		{Mechanism: "SCRAM-SHA-256", Username: "scram-user", Password: "scram-pass"},
	} {
		k := kafkaCfg(kc.Brokers(), "search-index")
		k.SASL = s
		got, err := scrape(t, newKafka(t, k), 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", s.Mechanism, err)
		}
		wantSeries(t, got, map[string]float64{lagKey("outbox_consumer_lag_messages", "search-index", "events"): 3}, 0)
	}

	bad := kafkaCfg(kc.Brokers(), "search-index")
	bad.SASL = config.SASL{Mechanism: "SCRAM-SHA-256", Username: "scram-user", Password: "wrong"}
	got, err := scrape(t, newKafka(t, bad), 10*time.Second)
	if err == nil {
		t.Fatal("wrong credentials must fail the collection")
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Fatalf("error shows the password: %v", err)
	}
	if len(got) != 0 {
		t.Fatalf("a failed cluster sends nothing; got %v", keys(got))
	}
}

// TestKafkaClusterDownAndBack closes the cluster mid-run: Update fails by
// its deadline and sends nothing; a cluster restarted on the same ports is
// collected again by the same collector.
func TestKafkaClusterDownAndBack(t *testing.T) {
	kc := kafkatest.New(t, 2)
	k := kafkaCfg(kc.Brokers(), "search-index")
	seed := func() {
		cl, adm := kafkaAdmin(t, k)
		seedTopic(t, cl, adm, "events", 2, 10)
		commit(t, adm, "search-index", "events", map[int32]int64{0: 7, 1: 7})
	}
	seed()
	c := newKafka(t, k)
	if _, err := scrape(t, c, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	kc.Close()
	var (
		got map[string]float64
		err error
	)
	testutil.Bounded(t, "Update against a closed cluster", 2*time.Second, func() { got, err = scrape(t, c, 2*time.Second) })
	if err == nil {
		t.Fatal("a closed cluster must fail the collection")
	}
	if len(got) != 0 {
		t.Fatalf("a failed cluster sends nothing; got %v", keys(got))
	}

	again, err := kfake.NewCluster(kfake.Ports(kc.Ports...))
	if err != nil {
		t.Fatalf("restart on the same ports: %v", err)
	}
	t.Cleanup(again.Close)
	seed()
	var last error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		got, last = scrape(t, c, 3*time.Second)
		if last == nil {
			break
		}
	}
	if last != nil {
		t.Fatalf("no recovery after restart: %v", last)
	}
	wantSeries(t, got, map[string]float64{lagKey("outbox_consumer_lag_messages", "search-index", "events"): 6}, 0)
}

// TestKafkaHungBrokerAndPartialFetch: a broker that answers record fetches
// with an error yields partial results (offset lag complete, time lag from
// the other partitions, Update errs); a broker that never answers cannot
// hold Update past its deadline.
func TestKafkaHungBrokerAndPartialFetch(t *testing.T) {
	kc, k, _, adm := seeded(t, 2, "search-index", 4)
	commit(t, adm, "search-index", "events", map[int32]int64{0: 1, 1: 2, 2: 3, 3: 4})
	leaders := map[int32]int32{}
	for p := int32(0); p < 4; p++ {
		leaders[p] = kc.LeaderFor("events", p)
	}
	failing := leaders[0]
	var hang atomic.Bool

	kc.ControlKey(kmsg.Fetch.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if hang.Load() {
			return nil, nil, true // never answers
		}
		if kc.CurrentNode() != failing {
			return nil, nil, false
		}
		req := kr.(*kmsg.FetchRequest)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.UnknownServerError.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	c := newKafka(t, k)
	now := kafkaBase.Add(time.Hour)
	c.now = func() time.Time { return now }
	got, err := scrape(t, c, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "partial") {
		t.Fatalf("Update = %v; want a partial-results error", err)
	}
	wantSeries(t, got, map[string]float64{lagKey("outbox_consumer_lag_messages", "search-index", "events"): 9 + 8 + 7 + 6}, 0)
	oldest := -1
	for p := int32(0); p < 4; p++ {
		if leaders[p] != failing && oldest < 0 {
			oldest = int(p) + 1 // commits are p+1
		}
	}
	if oldest > 0 {
		wantSeries(t, got, map[string]float64{
			lagKey("outbox_consumer_lag_seconds", "search-index", "events"): now.Sub(kafkaBase.Add(time.Duration(oldest) * time.Second)).Seconds(),
		}, 0.001)
	}

	// Now the broker swallows fetches and never answers.
	hang.Store(true)
	commit(t, adm, "search-index", "events", map[int32]int64{0: 2, 1: 3, 2: 4, 3: 5}) // every commit moved: must read
	testutil.Bounded(t, "Update against a hung broker", 1500*time.Millisecond, func() { _, err = scrape(t, c, 1500*time.Millisecond) })
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("Update under a hung broker: %v", err)
	}
	if err == nil {
		t.Fatal("a hung broker must fail the collection")
	}
}

// TestKafkaListFailsOnOneBroker: when listing groups fails on the broker
// that coordinates a group, the group is not taken for deleted: the groups
// the last collection knew are still looked up, and Update reports the
// partial failure.
func TestKafkaListFailsOnOneBroker(t *testing.T) {
	kc, k, _, adm := seeded(t, 3, "/g.*/", 1)
	for i := 0; i < 6; i++ {
		commit(t, adm, fmt.Sprintf("g%d", i), "events", map[int32]int64{0: int64(i)})
	}
	c := newKafka(t, k)
	c.now = func() time.Time { return kafkaBase.Add(time.Hour) }
	before, err := scrape(t, c, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	failing := kc.CoordinatorFor("g0")
	kc.ControlKey(kmsg.ListGroups.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if kc.CurrentNode() != failing {
			return nil, nil, false
		}
		resp := kr.(*kmsg.ListGroupsRequest).ResponseKind().(*kmsg.ListGroupsResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp, nil, true
	})
	after, err := scrape(t, c, 10*time.Second)
	if err == nil {
		t.Fatal("a failed listing is a partial failure")
	}
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("series changed while one broker failed listing:\nbefore %v\nafter  %v", keys(before), keys(after))
	}
}

// TestKafkaDeletedTopic: commits left on a deleted topic give no series
// and no error; the group's other topics are still collected.
func TestKafkaDeletedTopic(t *testing.T) {
	_, k, cl, adm := seeded(t, 1, "search-index", 1)
	seedTopic(t, cl, adm, "gone", 1, 10)
	commit(t, adm, "search-index", "events", map[int32]int64{0: 8})
	commit(t, adm, "search-index", "gone", map[int32]int64{0: 1})
	if _, err := adm.DeleteTopic(kafkaCtx(t), "gone"); err != nil {
		t.Fatal(err)
	}
	got, err := scrape(t, newKafka(t, k), 10*time.Second)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	for key := range got {
		if strings.Contains(key, "topic=gone") {
			t.Fatalf("series for a deleted topic: %s", key)
		}
	}
	wantSeries(t, got, map[string]float64{lagKey("outbox_consumer_lag_messages", "search-index", "events"): 2}, 0)
}

// TestKafkaUnreachableClusterFailsAlone runs two clusters through the
// Exporter, one of them down: only the down cluster's collector_success
// is 0, and the other's series are all there.
func TestKafkaUnreachableClusterFailsAlone(t *testing.T) {
	_, k, _, adm := seeded(t, 1, "search-index", 1)
	commit(t, adm, "search-index", "events", map[int32]int64{0: 4})

	down := kafkatest.New(t, 1)
	kDown := kafkaCfg(down.Brokers(), "search-index")
	down.Close()

	cUp, err := NewCollector("up", k, testutil.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cUp.Close)
	cDown, err := NewCollector("down", kDown, testutil.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cDown.Close)

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	ms := collectors.NewExporter(testutil.Quiet(), cUp, cDown).Collect(ctx)
	success := map[string]float64{}
	lagSeries := map[string]float64{}
	for _, m := range ms {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{}
		for _, l := range pb.Label {
			labels[l.GetName()] = l.GetValue()
		}
		switch desc := m.Desc().String(); {
		case strings.Contains(desc, `"outbox_exporter_collector_success"`):
			success[labels["target"]] = pb.GetGauge().GetValue()
		case strings.Contains(desc, `"outbox_consumer_lag_messages"`):
			lagSeries[labels["cluster"]] = pb.GetGauge().GetValue()
		}
	}
	if success["up"] != 1 || success["down"] != 0 {
		t.Fatalf("collector_success = %v; want up 1, down 0", success)
	}
	if len(lagSeries) != 1 || lagSeries["up"] != 6 {
		t.Fatalf("lag series by cluster = %v; want only up = 6", lagSeries)
	}
}
