package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
)

// TestKafkaUncommittedPartitions: a live KIP-848 member that has not
// committed yet, and a group whose topic grew a partition after its
// commits. Kafka's own tool shows "-" for both; the lag sums leave them
// out (uncommitted: ignore) and outbox_consumer_uncommitted_partitions
// counts them.
func TestKafkaUncommittedPartitions(t *testing.T) { onBoth(t, 1, uncommittedPartitions) }

func uncommittedPartitions(t *testing.T, e kenv) {
	live, grown, topic := e.n("live"), e.n("grown"), e.n("events")
	k := kafkaCfg(e.Brokers(), live, grown)
	cl, adm := kafkaAdmin(t, k)
	seedTopic(t, cl, adm, topic, 2, 5)
	commit(t, adm, grown, topic, map[int32]int64{0: 5, 1: 2})
	if _, err := adm.CreatePartitions(kafkaCtx(t), 1, topic); err != nil {
		t.Fatalf("add a partition: %v", err)
	}
	consumer, err := kafkaclient.New(k, kgo.ConsumerGroup(live), kgo.ServerSideBalancer(), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(consumer.Close)

	c := newKafka(t, k)
	now := kafkaBase.Add(time.Hour)
	c.now = func() time.Time { return now }
	membersKey := lagKey("outbox_consumer_group_members", live, "")
	liveKey := lagKey("outbox_consumer_uncommitted_partitions", live, topic)
	deadline := time.Now().Add(60 * time.Second)
	var got map[string]float64
	for {
		// Polling keeps the member in the group; it never commits.
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		consumer.PollFetches(ctx)
		cancel()
		got, err = scrape(t, c, 10*time.Second)
		if err == nil && got[membersKey] == 1 && got[liveKey] == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the live member never showed with 3 uncommitted partitions: err %v, series %v", err, got)
		}
	}
	wantSeries(t, got, map[string]float64{
		lagKey("outbox_consumer_uncommitted_partitions", grown, topic): 1,
		lagKey("outbox_consumer_lag_messages", grown, topic):           3,
		liveKey: 3,
	}, 0)
}
