package kafka

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// shareSeeded is a topic of 3 partitions x 30 records (timestamped a
// second apart) and share groups whose start offsets were set, each
// group at its own, with nothing acknowledged: the broker's lag of a
// partition is its end minus the start offset.
type shareSeeded struct {
	topic  string
	groups []string
	spso   map[string][3]int64
}

func seedShareGroups(t *testing.T, e kenv, k *config.Kafka, n int) shareSeeded {
	t.Helper()
	cl, adm := kafkaAdmin(t, k)
	s := shareSeeded{topic: e.n("jobs"), spso: map[string][3]int64{}}
	if _, err := adm.CreateTopic(kafkaCtx(t), 3, 1, nil, s.topic); err != nil {
		t.Fatal(err)
	}
	var rs []*kgo.Record
	for p := int32(0); p < 3; p++ {
		for i := 0; i < 30; i++ {
			rs = append(rs, &kgo.Record{Topic: s.topic, Partition: p, Value: []byte("v"), Timestamp: kafkaBase.Add(time.Duration(i) * time.Second)})
		}
	}
	if err := cl.ProduceSync(kafkaCtx(t), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for g := 0; g < n; g++ {
		name := e.n(fmt.Sprintf("q%02d", g))
		at := [3]int64{int64(g), int64(2 * g % 30), int64(29 - g)}
		os := kadm.Offsets{}
		for p, o := range at {
			os.Add(kadm.Offset{Topic: s.topic, Partition: int32(p), At: o, LeaderEpoch: -1})
		}
		alterShareOffsets(t, adm, name, os)
		s.groups, s.spso[name] = append(s.groups, name), at
	}
	return s
}

// alterShareOffsets sets a share group's start offsets (creating the
// group), asking again while the broker's share coordinator moves or
// loads.
func alterShareOffsets(t *testing.T, adm *kadm.Client, group string, os kadm.Offsets) {
	t.Helper()
	ctx := kafkaCtx(t)
	for {
		rs, err := adm.AlterShareGroupOffsets(ctx, group, os)
		if err == nil {
			err = rs.Error()
		}
		if err == nil {
			return
		}
		if !errors.Is(err, kerr.NotCoordinator) && !errors.Is(err, kerr.CoordinatorLoadInProgress) && !errors.Is(err, kerr.CoordinatorNotAvailable) || ctx.Err() != nil {
			t.Fatalf("alter share group offsets of %s: %v", group, err)
		}
		time.Sleep(100 * time.Millisecond) // a pause between asks, not a wait for a condition
	}
}

// want is the lag series of group by brute force: the records at or
// after each start offset, and the age of the oldest of them.
func (s shareSeeded) want(group string, now time.Time) map[string]float64 {
	msgs, oldest := int64(0), int64(30)
	for _, o := range s.spso[group] {
		msgs += 30 - o
		oldest = min(oldest, o)
	}
	return map[string]float64{
		lagKey("outbox_share_group_lag_messages", group, s.topic): float64(msgs),
		lagKey("outbox_share_group_lag_seconds", group, s.topic):  now.Sub(kafkaBase.Add(time.Duration(oldest) * time.Second)).Seconds(),
	}
}

// Share groups asked in chunks of 3 over 2 connections (the offsets asked
// with requests, as where the share coordinator's log cannot be read):
// every group of every chunk is exported with the broker's lag.
func TestShareChunks(t *testing.T) {
	onBoth(t, 1, func(t *testing.T, e kenv) {
		k := kafkaCfg(e.Brokers())
		k.ShareGroups = []string{e.pat("/q.*/")}
		s := seedShareGroups(t, e, k, 8)
		c := newKafka(t, k)
		askOffsets(c)
		c.shareLim = shareLimits{chunk: 3, fixed: true, conns: 2, timeout: 30 * time.Second}
		now := kafkaBase.Add(time.Hour)
		c.now = func() time.Time { return now }
		got, err := scrape(t, c, 60*time.Second)
		if err != nil {
			t.Fatalf("Update: %v", err)
		}
		for _, g := range s.groups {
			wantSeries(t, got, s.want(g, now), 0.001)
		}
	})
}

// A share group whose offsets request gets no answer has no lag series;
// the other groups are exported exactly, the collection is partial and
// one WARN counts the group. kfake stands in for the broker here (Apache
// Kafka cannot be made to leave one group unanswered on demand): it
// closes the connection of every DescribeShareGroupOffsets naming the
// group ("dropped"), or holds it past the request's time limit ("late").
func TestShareGroupUnanswered(t *testing.T) {
	for _, late := range []bool{false, true} {
		name := map[bool]string{false: "dropped", true: "late"}[late]
		t.Run(name, func(t *testing.T) { testShareUnanswered(t, late) })
	}
}

func testShareUnanswered(t *testing.T, late bool) {
	kc := kafkatest.New(t, 1)
	e := kenv{Env: kc, kc: kc}
	k := kafkaCfg(e.Brokers())
	k.ShareGroups = []string{e.pat("/q.*/")}
	s := seedShareGroups(t, e, k, 4)
	// The last group: a held request holds its connection, and no
	// chunk comes after it.
	bad := s.groups[3]
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	kc.ControlKey(kmsg.NewPtrDescribeShareGroupOffsetsRequest().Key(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		for _, g := range r.(*kmsg.DescribeShareGroupOffsetsRequest).Groups {
			if g.GroupID != bad {
				continue
			}
			if late {
				kc.SleepControl(func() { <-release })
				return nil, nil, false
			}
			return nil, errors.New("dropped"), true
		}
		return nil, nil, false
	})
	var logs bytes.Buffer
	c, err := NewCollector("main", k, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.shareLim = shareLimits{chunk: 1, fixed: true, conns: 2, timeout: 5 * time.Second}
	now := kafkaBase.Add(time.Hour)
	c.now = func() time.Time { return now }
	start := time.Now()
	got, err := scrape(t, c, 30*time.Second)
	t.Logf("collection took %s", time.Since(start))
	if err == nil || !strings.Contains(err.Error(), "share groups: 1 of 4 not answered") {
		t.Fatalf("Update: %v; want one of 4 share groups not answered", err)
	}
	for _, g := range s.groups {
		if g == bad {
			continue
		}
		wantSeries(t, got, s.want(g, now), 0.001)
	}
	for key := range s.want(bad, now) {
		if v, ok := got[key]; ok {
			t.Fatalf("%s = %v exported for the group not answered", key, v)
		}
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "groups=1 of=4") {
		t.Fatalf("no WARN counting the group not answered:\n%s", logs.String())
	}
}

// With the default limits, the offsets asked with requests (as where the
// share coordinator's log cannot be read), their size follows the
// broker: on kfake, which answers many groups as fast as one, requests
// soon name many groups; on Apache Kafka 4.4, where groups asked together
// wait seconds, the one trial of two groups fails and the groups are
// asked one a request. The describes name many groups a request; every
// group is exported exactly, and every collection succeeds.
func TestShareOffsetsBatchSize(t *testing.T) {
	onBoth(t, 1, func(t *testing.T, e kenv) {
		k := kafkaCfg(e.Brokers())
		k.ShareGroups = []string{e.pat("/q.*/")}
		s := seedShareGroups(t, e, k, 30)
		var (
			mu         sync.Mutex
			offs, desc []int
		)
		if e.kc != nil {
			watchGroups(e.kc, &mu, kmsg.NewPtrDescribeShareGroupOffsetsRequest().Key(), func(r kmsg.Request) int {
				return len(r.(*kmsg.DescribeShareGroupOffsetsRequest).Groups)
			}, &offs)
			watchGroups(e.kc, &mu, kmsg.NewPtrShareGroupDescribeRequest().Key(), func(r kmsg.Request) int {
				return len(r.(*kmsg.ShareGroupDescribeRequest).GroupIDs)
			}, &desc)
		}
		c := newKafka(t, k)
		askOffsets(c)
		now := kafkaBase.Add(time.Hour)
		c.now = func() time.Time { return now }
		for i := 0; i < 3; i++ {
			mu.Lock()
			offs, desc = nil, nil
			mu.Unlock()
			got, err := scrape(t, c, 60*time.Second)
			if err != nil {
				t.Fatalf("Update %d: %v", i, err)
			}
			for _, g := range s.groups {
				wantSeries(t, got, s.want(g, now), 0.001)
			}
		}
		size, trials, failed := c.shareBatch.stats()
		t.Logf("proven size %d, %d trials, %d failed", size, trials, failed)
		if e.kc == nil {
			// Which size Apache Kafka 4.4 earns depends on how fast its
			// queue answers on this machine (an idle one may answer a
			// batch of 2 or 4 in time: a clean-clone CI run ended at 4
			// after one failed trial); the choice itself is tested on
			// simulated brokers. Here: trials were made, and every value
			// above was exact whatever the size.
			if trials == 0 {
				t.Fatalf("on Apache Kafka: size %d, no trial made in three collections", size)
			}
			return
		}
		if size < 4 {
			t.Fatalf("on kfake: size %d after three collections; want batches", size)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(offs) >= len(s.groups)/2 {
			t.Fatalf("the last collection sent %d offsets requests %v for %d groups; want batches", len(offs), offs, len(s.groups))
		}
		if len(desc) != 1 || desc[0] != len(s.groups) {
			t.Fatalf("describes named %v groups; want all %d in one", desc, len(s.groups))
		}
	})
}

// watchGroups records, for each request of key kc receives, how many
// groups it names.
func watchGroups(kc *kafkatest.Cluster, mu *sync.Mutex, key int16, n func(kmsg.Request) int, into *[]int) {
	kc.ControlKey(key, func(r kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		mu.Lock()
		*into = append(*into, n(r))
		mu.Unlock()
		return nil, nil, false
	})
}

// A collection that leaves a share group unanswered makes the next one
// ask from that group on: groups a scrape's time did not reach are asked
// first next time, so no group is left without series scrape after
// scrape. kfake drops every request naming the third group in the first
// collection (Apache Kafka cannot be made to drop one on demand) and
// records the order.
func TestShareAskedFromLastMissed(t *testing.T) {
	kc := kafkatest.New(t, 1)
	e := kenv{Env: kc, kc: kc}
	k := kafkaCfg(e.Brokers())
	k.ShareGroups = []string{e.pat("/q.*/")}
	s := seedShareGroups(t, e, k, 4)
	bad := s.groups[2]
	var (
		mu    sync.Mutex
		asked []string
		drop  = true
	)
	kc.ControlKey(kmsg.NewPtrDescribeShareGroupOffsetsRequest().Key(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		for _, g := range r.(*kmsg.DescribeShareGroupOffsetsRequest).Groups {
			asked = append(asked, g.GroupID)
			if g.GroupID == bad && drop {
				return nil, errors.New("dropped"), true
			}
		}
		return nil, nil, false
	})
	c := newKafka(t, k)
	c.shareLim = shareLimits{chunk: 1, fixed: true, conns: 1, timeout: 5 * time.Second}
	now := kafkaBase.Add(time.Hour)
	c.now = func() time.Time { return now }
	if _, err := scrape(t, c, 30*time.Second); err == nil || !strings.Contains(err.Error(), "share groups: 1 of 4 not answered") {
		t.Fatalf("first Update: %v; want the dropped group not answered", err)
	}
	mu.Lock()
	asked, drop = nil, false
	mu.Unlock()
	got, err := scrape(t, c, 30*time.Second)
	if err != nil {
		t.Fatalf("second Update: %v", err)
	}
	for _, g := range s.groups {
		wantSeries(t, got, s.want(g, now), 0.001)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{s.groups[2], s.groups[3], s.groups[0], s.groups[1]}
	if fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Fatalf("second collection asked %v; want %v (from the group missed on)", asked, want)
	}
}
