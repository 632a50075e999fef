package kafka

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// shareAckSome joins share group group on topic from the earliest offset
// and, for a seeded number of polls, accepts or releases each record it
// gets (by the seed), then flushes its acknowledgements and stays a
// member, polling no more, until the test ends. What it got in each poll
// may depend on timing; the oracle compares with whatever the broker then
// reports.
func shareAckSome(t *testing.T, k *config.Kafka, cl *kgo.Client, group, topic string, rng *rand.Rand) {
	t.Helper()
	shareFromEarliest(t, cl, group)
	sc, err := kafkaclient.New(k, kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.ShareMaxRecords(1+rng.Int32N(5)), kgo.ShareMaxRecordsStrict())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sc.Close)
	for range 1 + rng.IntN(3) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		fs := sc.PollFetches(ctx)
		cancel()
		var acc, rel []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			if rng.IntN(3) > 0 {
				acc = append(acc, r)
			} else {
				rel = append(rel, r)
			}
		})
		sc.MarkAcks(kgo.AckAccept, acc...)
		sc.MarkAcks(kgo.AckRelease, rel...)
	}
	if err := sc.FlushAcks(kafkaCtx(t)); err != nil {
		t.Fatalf("flush acks: %v", err)
	}
}

// shareTool is what Kafka's ShareGroupCommand printed, parsed and raw.
type shareTool struct {
	rows []kafkatest.LagRow
	out  string
}

// checkShareOracle compares the share group's series with Kafka's
// ShareGroupCommand (LAG, summed) and its time lag with the records a
// read_uncommitted reader sees at or after each partition's reported
// start offset (Kafka's default share.isolation.level).
func checkShareOracle(t *testing.T, h history, tool shareTool, got map[string]float64, starts, ends map[int32]int64, records map[int32][]visibleRecord) {
	rows, out := tool.rows, tool.out
	var lag int64
	var secs float64
	n := 0
	for _, r := range rows {
		if r.Group != h.share || r.Topic != h.topic || !r.LagOK || !r.OffsetOK {
			continue
		}
		n++
		lag += r.Lag
		if r.Lag == 0 {
			continue
		}
		from := max(r.Offset, starts[r.Partition])
		for _, v := range records[r.Partition] {
			if v.off >= from && v.off < ends[r.Partition] {
				secs = max(secs, h.at.Sub(v.ts).Seconds())
				break
			}
		}
	}
	if n == 0 {
		// The group has no share-partition state yet (its first poll
		// got nothing): no lag series either.
		if v, ok := got[lagKey("outbox_share_group_lag_messages", h.share, h.topic)]; ok {
			t.Errorf("share group %s: no state in Kafka's tool, lag %v here\n%s", h.share, v, out)
		}
		return
	}
	wantSeries(t, got, map[string]float64{
		lagKey("outbox_share_group_lag_messages", h.share, h.topic): float64(lag),
		lagKey("outbox_share_group_lag_seconds", h.share, h.topic):  secs,
		lagKey("outbox_share_group_members", h.share, ""):           1,
	}, 0.001)
	if t.Failed() {
		t.Logf("ShareGroupCommand:\n%s", out)
	}
}
