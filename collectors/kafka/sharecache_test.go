package kafka

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// setShareStart sets share group g's start offsets on topic (the group
// must have no members; Kafka creates it if it does not exist).
func setShareStart(t *testing.T, adm *kadm.Client, g, topic string, at map[int32]int64) {
	t.Helper()
	os := kadm.Offsets{}
	for p, o := range at {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1})
	}
	rs, err := adm.AlterShareGroupOffsets(kafkaCtx(t), g, os)
	if err == nil {
		err = rs.Error()
	}
	if err != nil {
		t.Fatalf("set start offsets of share group %s: %v", g, err)
	}
}

// TestKafkaShareProbesCached: the records at share groups' start offsets
// are read once and then come from the probe cache (a steady scrape sends
// no Fetch), shared with a consumer group on the same offsets; a moved
// start offset is read again and answers as a new collector does.
func TestKafkaShareProbesCached(t *testing.T) { onBoth(t, 2, shareProbesCached) }

func shareProbesCached(t *testing.T, e kenv) {
	k := kafkaCfg(e.Brokers(), e.pat("/g.*/"))
	k.ShareGroups = []string{e.pat("/q.*/")}
	cl, adm := kafkaAdmin(t, k)
	topic := e.n("events")
	seedTopic(t, cl, adm, topic, 4, 20)
	for i := 0; i < 3; i++ {
		setShareStart(t, adm, e.n(fmt.Sprintf("q%d", i)), topic, map[int32]int64{0: int64(i), 1: int64(i + 1), 2: int64(i + 2), 3: int64(i + 3)})
	}
	commit(t, adm, e.n("g0"), topic, map[int32]int64{0: 0, 1: 1, 2: 2, 3: 3})
	c := newKafka(t, k)
	now := kafkaBase.Add(time.Hour)
	c.now = func() time.Time { return now }
	first, err := scrape(t, c, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := first[lagKey("outbox_share_group_lag_seconds", e.n("q1"), topic)]; got != now.Sub(kafkaBase.Add(time.Second)).Seconds() {
		t.Fatalf("q1's time lag %v, want the age of record 1", got)
	}
	if c.shareLog.fromLog != (e.kc == nil) {
		t.Fatalf("share offsets from the share coordinator's log: %v; want it on Apache Kafka only", c.shareLog.fromLog)
	}
	f1 := c.prober.Fetches()
	if f1 == 0 {
		t.Fatal("the first scrape read no record")
	}
	second, err := scrape(t, c, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if f := c.prober.Fetches(); f != f1 {
		t.Fatalf("steady state sent %d more fetches; want none", f-f1)
	}
	if fmt.Sprint(first) != fmt.Sprint(second) {
		t.Fatalf("cached scrape differs:\n%v\n%v", first, second)
	}
	setShareStart(t, adm, e.n("q0"), topic, map[int32]int64{0: 15, 1: 16, 2: 17, 3: 18})
	third, err := scrape(t, c, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if f := c.prober.Fetches(); f == f1 {
		t.Fatal("a moved start offset must be read")
	}
	fresh := newKafka(t, k)
	fresh.now = c.now
	want, err := scrape(t, fresh, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(third) != fmt.Sprint(want) {
		t.Fatalf("after a moved start offset:\n%v\nnew collector:\n%v", third, want)
	}
}
