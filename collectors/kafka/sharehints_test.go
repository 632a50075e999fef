package kafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// A collector keeps each share group's label sets between collections,
// as it does a consumer group's: moved start offsets show their new lag
// and age on the kept sets, and a group whose state changed shows its new
// state, never the old one beside it. kfake answers the describe with
// the new state: a share group's state cannot be set on demand on a
// broker without members joining and leaving on their own schedule.
func TestShareLabelSetsKeptAcrossCollections(t *testing.T) {
	kc := kafkatest.New(t, 1)
	e := kenv{Env: kc, kc: kc}
	k := kafkaCfg(e.Brokers())
	k.ShareGroups = []string{e.pat("/s.*/")}
	cl, adm := kafkaAdmin(t, k)
	topic, g := e.n("t"), e.n("s0")
	seedTopic(t, cl, adm, topic, 2, 10)
	setShareStart(t, adm, g, topic, map[int32]int64{0: 3, 1: 7})
	now := kafkaBase.Add(time.Hour)
	c := newKafka(t, k)
	c.now = func() time.Time { return now }
	info := func(state string) string { return "outbox_share_group_info{group=" + g + ",state=" + state + "}" }
	round := func(name string, lag, from int64, state, stale string) {
		t.Helper()
		got, err := scrape(t, c, 20*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		wantSeries(t, shareSeries(got), map[string]float64{
			lagKey("outbox_share_group_lag_messages", g, topic): float64(lag),
			lagKey("outbox_share_group_lag_seconds", g, topic):  now.Sub(kafkaBase.Add(time.Duration(from) * time.Second)).Seconds(),
			lagKey("outbox_share_group_members", g, ""):         0,
			info(state): 1,
		}, 0.001)
		if v, ok := got[info(stale)]; ok {
			t.Fatalf("%s: %s = %v still exported", name, info(stale), v)
		}
	}
	round("first", 10, 3, "Empty", "Stable")
	setShareStart(t, adm, g, topic, map[int32]int64{0: 5, 1: 8})
	round("moved", 7, 5, "Empty", "Stable")
	kc.ControlKey(kmsg.NewPtrShareGroupDescribeRequest().Key(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		req := r.(*kmsg.ShareGroupDescribeRequest)
		resp := req.ResponseKind().(*kmsg.ShareGroupDescribeResponse)
		for _, id := range req.GroupIDs {
			rg := kmsg.NewShareGroupDescribeResponseGroup()
			rg.GroupID, rg.GroupState = id, "Stable"
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil, true
	})
	round("state changed", 7, 5, "Stable", "Empty")
}
