package kafka

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// shareFromEarliest sets the share group's share.auto.offset.reset to
// earliest, so that it reads the records already on the topic.
func shareFromEarliest(t *testing.T, cl *kgo.Client, group string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	r.ResourceName = group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name = "share.auto.offset.reset"
	c.Value = kmsg.StringPtr("earliest")
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(kafkaCtx(t), cl)
	if err != nil {
		t.Fatalf("alter group config: %v", err)
	}
	for _, rr := range resp.Resources {
		if rr.ErrorCode != 0 {
			t.Fatalf("alter group config of %s: error %d", group, rr.ErrorCode)
		}
	}
}

// shareAcceptBelow joins group as a share consumer of topic, accepts the
// records below offset upTo and releases the others, and stays a member
// until the test ends.
func shareAcceptBelow(t *testing.T, k *config.Kafka, group, topic string, upTo int64) {
	t.Helper()
	sc, err := kafkaclient.New(k, kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.ShareMaxRecords(int32(upTo)), kgo.ShareMaxRecordsStrict())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sc.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	accepted := map[int64]bool{}
	for int64(len(accepted)) < upTo {
		fs := sc.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("share consumer: %d of %d records accepted before the deadline", len(accepted), upTo)
		}
		var acc, rel []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < upTo {
				acc = append(acc, r)
				accepted[r.Offset] = true
			} else {
				rel = append(rel, r)
			}
		})
		sc.MarkAcks(kgo.AckAccept, acc...)
		sc.MarkAcks(kgo.AckRelease, rel...)
	}
	if err := sc.FlushAcks(ctx); err != nil {
		t.Fatalf("flush acks: %v", err)
	}
}

// shareToolLag runs Kafka's own ShareGroupCommand --describe on group and
// returns its LAG and START-OFFSET by partition of topic.
func shareToolLag(t *testing.T, b *kafkatest.Broker, group, topic string) (lag, start map[int32]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	out, err := b.RunTool(ctx, "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
		"--bootstrap-server", b.Brokers()[0], "--describe", "--group", group)
	if err != nil {
		t.Fatal(err)
	}
	lag, start = map[int32]int64{}, map[int32]int64{}
	var cols []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "GROUP" {
			cols = f
			continue
		}
		if cols == nil || len(f) != len(cols) || f[0] != group {
			continue
		}
		row := map[string]string{}
		for i, c := range cols {
			row[c] = f[i]
		}
		if row["TOPIC"] != topic {
			continue
		}
		p, _ := strconv.Atoi(row["PARTITION"])
		if v, err := strconv.ParseInt(row["LAG"], 10, 64); err == nil {
			lag[int32(p)] = v
		}
		if v, err := strconv.ParseInt(row["START-OFFSET"], 10, 64); err == nil {
			start[int32(p)] = v
		}
	}
	t.Logf("%s", out)
	if len(lag) == 0 {
		t.Fatalf("no LAG of %s on %s in the tool's output:\n%s", group, topic, out)
	}
	return lag, start
}

// TestKafkaShareGroup: a share group whose consumer accepted the first
// four of ten records and released the rest. Its lag is what
// kafka-share-groups --describe reports, its time lag the age of the
// record at the share-partition start offset, and it has one member.
func TestKafkaShareGroup(t *testing.T) {
	e := realEnv(t)
	b := kafkatest.Shared(t)
	g, topic := e.n("queue"), e.n("jobs")
	k := kafkaCfg(e.Brokers())
	k.ShareGroups = []string{e.pat("/q.*/")}
	cl, adm := kafkaAdmin(t, k)
	if _, err := adm.CreateTopic(kafkaCtx(t), 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	// One batch per record: the broker moves a share-partition's start
	// offset past whole batches only.
	for i := 0; i < 10; i++ {
		r := &kgo.Record{Topic: topic, Value: []byte("v"), Timestamp: kafkaBase.Add(time.Duration(i) * time.Second)}
		if err := cl.ProduceSync(kafkaCtx(t), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	shareFromEarliest(t, cl, g)
	shareAcceptBelow(t, k, g, topic, 4)

	lag, start := shareToolLag(t, b, g, topic)
	if lag[0] != 6 {
		t.Fatalf("kafka-share-groups: lag %d; the seeding wants 6", lag[0])
	}
	now := kafkaBase.Add(time.Hour)
	got := scrapeShares(t, k, now, true)
	wantSeries(t, got, map[string]float64{
		lagKey("outbox_share_group_lag_messages", g, topic):     float64(lag[0]),
		lagKey("outbox_share_group_lag_seconds", g, topic):      now.Sub(kafkaBase.Add(time.Duration(start[0]) * time.Second)).Seconds(),
		lagKey("outbox_share_group_members", g, ""):             1,
		lagKey("outbox_consumer_deadline_seconds", g, ""):       600,
		"outbox_share_group_info{group=" + g + ",state=Stable}": 1,
	}, 0.001)
}

// A share-partition the group has not fetched from has no state: start
// offset and lag -1. It is not counted (Kafka's tool shows "-"); one
// with a state but no lag (a broker before DescribeShareGroupOffsets v1)
// is unknown.
func TestShareParts(t *testing.T) {
	o := &kmsg.DescribeShareGroupOffsetsResponseGroup{GroupID: "q", Topics: []kmsg.DescribeShareGroupOffsetsResponseGroupTopic{{
		Topic: "jobs",
		Partitions: []kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition{
			{Partition: 2, StartOffset: 3, Lag: -1},
			{Partition: 0, StartOffset: -1, Lag: -1},
			{Partition: 1, StartOffset: 4, Lag: 6},
		},
	}}}
	var partial []error
	got := shareParts(o, nil, &partial)["jobs"]
	want := []sharePart{{part: 1, spso: 4, lag: 6, lagOK: true}, {part: 2, spso: 3, lag: -1}}
	if !reflect.DeepEqual(got, want) || len(partial) != 0 {
		t.Fatalf("got %+v (partial %v), want %+v", got, partial, want)
	}
	got[0].o, got[0].oOK = Offsets{Commit: 4, End: 10}, true
	got[0].setProbe(&cachedProbe{key: probeKey{from: 4}, next: 5, stable: 10, found: true, offset: 4, stamped: true, ms: kafkaBase.Add(-time.Minute).UnixMilli()})
	sum, _ := shareSum(got, kafkaBase, nil)
	if sum.Messages != 6 || !sum.MessagesOK || sum.Seconds != 60 || !sum.Partial || sum.Unknown != 1 {
		t.Fatalf("sum %+v: want 6 messages, 60 s, one partition unknown", sum)
	}
}

// When the end offsets cannot be read, every share group's time lag is
// unknown: the collection is partial with one error counting the groups'
// topics, not one error each (10,000 lines at 10,000 groups), and the
// broker's message lag is still exported. kfake stands in for the broker:
// Apache Kafka cannot be made to fail ListOffsets on demand.
func TestShareLowerBoundsOneError(t *testing.T) {
	kc := kafkatest.New(t, 1)
	e := kenv{Env: kc, kc: kc}
	k := kafkaCfg(e.Brokers())
	k.ShareGroups = []string{e.pat("/q.*/")}
	s := seedShareGroups(t, e, k, 5)
	kc.ControlKey(kmsg.NewPtrListOffsetsRequest().Key(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		req := r.(*kmsg.ListOffsetsRequest)
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.UnknownServerError.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	c := newKafka(t, k)
	now := kafkaBase.Add(time.Hour)
	c.now = func() time.Time { return now }
	got, err := scrape(t, c, 30*time.Second)
	if err == nil {
		t.Fatal("Update succeeded with no end offsets")
	}
	if n := strings.Count(err.Error(), "is a lower bound"); n != 1 || !strings.Contains(err.Error(), "lag of 5 share groups' topics is a lower bound: 15 of 15 partitions unknown") {
		t.Fatalf("%d lower-bound errors in %v; want one counting the 5 groups' topics", n, err)
	}
	for _, g := range s.groups {
		w := s.want(g, now)
		msgs := lagKey("outbox_share_group_lag_messages", g, s.topic)
		if got[msgs] != w[msgs] {
			t.Fatalf("%s = %v, want %v", msgs, got[msgs], w[msgs])
		}
		if v, ok := got[lagKey("outbox_share_group_lag_seconds", g, s.topic)]; ok {
			t.Fatalf("time lag %v of %s exported without end offsets", v, g)
		}
	}
}

// A group's topics share one allocation: each topic keeps its own
// partitions, a filtered topic takes no room, and a partition's error is
// reported and leaves it unknown.
func TestSharePartsTopicsApart(t *testing.T) {
	part := func(p int32, start, lag int64, code int16) kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition {
		return kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition{Partition: p, StartOffset: start, Lag: lag, ErrorCode: code}
	}
	o := &kmsg.DescribeShareGroupOffsetsResponseGroup{GroupID: "q", Topics: []kmsg.DescribeShareGroupOffsetsResponseGroupTopic{
		{Topic: "a", Partitions: []kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition{part(1, 5, 2, 0), part(0, 1, 3, 0)}},
		{Topic: "skip", Partitions: []kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition{part(0, 9, 9, 0)}},
		{Topic: "b", Partitions: []kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition{part(2, 7, 1, 0), part(0, 4, 4, kerr.UnknownServerError.Code)}},
	}}
	var partial []error
	got := shareParts(o, func(t string) bool { return t != "skip" }, &partial)
	want := map[string][]sharePart{
		"a": {{part: 0, spso: 1, lag: 3, lagOK: true}, {part: 1, spso: 5, lag: 2, lagOK: true}},
		"b": {{part: 0}, {part: 2, spso: 7, lag: 1, lagOK: true}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if len(partial) != 1 || !strings.Contains(partial[0].Error(), "share group offset of q on b/0") {
		t.Fatalf("partial %v: want one error for b/0", partial)
	}
	got["a"] = append(got["a"], sharePart{part: 9})
	if got["b"][0].part != 0 || got["b"][0].lagOK {
		t.Fatalf("appending to a's partitions changed b's: %+v", got["b"])
	}
}
