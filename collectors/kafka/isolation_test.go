package kafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
)

// txn writes one transaction of n records to topic's partition 0, record
// i timestamped at + i seconds, and ends it with end; open leaves it open
// until the test ends.
func txn(t *testing.T, k *config.Kafka, id, topic string, at time.Time, n int, end kgo.TransactionEndTry, open bool) {
	t.Helper()
	ctx := kafkaCtx(t)
	p, err := kafkaclient.New(k, kgo.TransactionalID(id), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		r := &kgo.Record{Value: []byte("v"), Timestamp: at.Add(time.Duration(i) * time.Second)}
		if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if open {
		t.Cleanup(p.Close)
		return
	}
	if err := p.EndTransaction(ctx, end); err != nil {
		t.Fatal(err)
	}
	p.Close()
}

// TestKafkaIsolation: the time lag ages the first record the group's
// consumers read. A read_uncommitted consumer reads aborted records and
// open transactions; a read_committed one skips them. The offset lag is
// Kafka's LAG for both.
func TestKafkaIsolation(t *testing.T) { onBoth(t, 1, isolation) }

func isolation(t *testing.T, e kenv) {
	k := kafkaCfg(e.Brokers(), e.pat("/.*/"))
	k.Isolations = map[string]string{e.n("ru"): config.IsolationReadUncommitted, e.n("ru-open"): config.IsolationReadUncommitted}
	_, adm := kafkaAdmin(t, k)
	topic := e.n("iso")
	if _, err := adm.CreateTopic(kafkaCtx(t), 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	// Each transaction's marker is written after EndTransaction returns:
	// wait for it before the next transaction, so the offsets are these.
	txn(t, k, e.n("tx-a"), topic, kafkaBase, 3, kgo.TryAbort, false) // 0-2 aborted, 3 marker
	waitEnd(t, adm, topic, 4)
	txn(t, k, e.n("tx-c"), topic, kafkaBase.Add(10*time.Second), 2, kgo.TryCommit, false) // 4-5, 6 marker
	waitEnd(t, adm, topic, 7)
	txn(t, k, e.n("tx-o"), topic, kafkaBase.Add(20*time.Second), 2, kgo.TryCommit, true) // 7-8 open: HWM 9
	waitEnd(t, adm, topic, 9)
	for _, g := range []string{"rc", "ru"} {
		commit(t, adm, e.n(g), topic, map[int32]int64{0: 0})
	}
	for _, g := range []string{"rc-open", "ru-open"} {
		commit(t, adm, e.n(g), topic, map[int32]int64{0: 7})
	}
	now := kafkaBase.Add(time.Hour)
	got := scrapeAt(t, k, now)
	age := func(s time.Duration) float64 { return now.Sub(kafkaBase.Add(s * time.Second)).Seconds() }
	wantSeries(t, got, map[string]float64{
		lagKey("outbox_consumer_lag_messages", e.n("rc"), topic):      9,
		lagKey("outbox_consumer_lag_seconds", e.n("rc"), topic):       age(10),
		lagKey("outbox_consumer_lag_messages", e.n("ru"), topic):      9,
		lagKey("outbox_consumer_lag_seconds", e.n("ru"), topic):       age(0),
		lagKey("outbox_consumer_lag_messages", e.n("rc-open"), topic): 2,
		lagKey("outbox_consumer_lag_seconds", e.n("rc-open"), topic):  0,
		lagKey("outbox_consumer_lag_messages", e.n("ru-open"), topic): 2,
		lagKey("outbox_consumer_lag_seconds", e.n("ru-open"), topic):  age(20),
	}, 0.001)
}

// waitEnd waits, within kafkaCtx's deadline, until partition 0 of topic
// has high watermark want, and fails if it passes it.
func waitEnd(t *testing.T, adm *kadm.Client, topic string, want int64) {
	t.Helper()
	ctx := kafkaCtx(t)
	for {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := ends.Lookup(topic, 0)
		if o.Offset == want {
			return
		}
		if o.Offset > want || ctx.Err() != nil {
			t.Fatalf("%s high watermark %d, want %d: seeding is off", topic, o.Offset, want)
		}
	}
}
