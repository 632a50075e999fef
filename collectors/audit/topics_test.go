package audit

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// startAudit starts an auditor of cfg at the clock's time and waits until
// it has read the window.
func (f *fixture) startAudit(cfg *config.Audit, clock func() time.Time) *Auditor {
	f.t.Helper()
	a, err := New("messages", cfg, f.ob, f.kcfg, f.pool, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	a.SetCompareInterval(time.Hour)
	if clock != nil {
		a.setClock(clock)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.Start(ctx)
	f.t.Cleanup(func() { cancel(); a.Close() })
	waitReady(f.t, a)
	return a
}

func (f *fixture) admin() *kadm.Client { return kadm.NewClient(f.prod) }

// deleteBefore deletes the records of a partition before offset off, as
// retention does.
func (f *fixture) deleteBefore(topic string, partition int32, off int64) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: topic, Partition: partition, At: off})
	resp, err := f.admin().DeleteRecords(ctx, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		f.t.Fatalf("delete records of %s[%d] before %d: %v", topic, partition, off, err)
	}
}

func ptrTime(t time.Time) *time.Time { return &t }

func auditCfg(topics ...string) *config.Audit {
	return &config.Audit{Kafka: "main", Topics: topics, EventID: "header:event_id", Sample: 1, Grace: time.Minute, Window: time.Hour}
}

// envs runs fn against kfake and against the real broker, where the two
// can answer differently (log start after deletion and compaction).
func envs(t *testing.T, fn func(t *testing.T, f *fixture)) {
	t.Run("kfake", func(t *testing.T) {
		c := kafkatest.New(t, 1)
		f := newFixtureOn(t, c)
		f.kafka = c
		fn(t, f)
	})
	t.Run("kafka", func(t *testing.T) { fn(t, newFixtureOn(t, kafkatest.Shared(t))) })
}

// createTopic creates a topic with a name unique to the test.
func (f *fixture) createTopic(partitions int32, configs map[string]string) string {
	f.t.Helper()
	name := kafkatest.Name(f.t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := map[string]*string{}
	for k, v := range configs {
		cfg[k] = &v
	}
	resp, err := f.admin().CreateTopic(ctx, partitions, 1, cfg, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		f.t.Fatalf("create topic %s: %v", name, err)
	}
	// Wait until every partition has a leader that answers.
	for {
		ends, err := f.admin().ListEndOffsets(ctx, name)
		if err == nil && ends.Error() == nil && len(ends[name]) == int(partitions) {
			return name
		}
		if ctx.Err() != nil {
			f.t.Fatalf("topic %s not ready: %v", name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAuditRetentionShorterThanWindow: rows published before the
// earliest record the topics still hold are not judged after a restart,
// the window gauge says how far back the audit judges, and a loss inside
// what the topics hold is still found.
func TestAuditRetentionShorterThanWindow(t *testing.T) { envs(t, testRetention) }

func testRetention(t *testing.T, f *fixture) {
	topic := f.createTopic(2, nil)
	now := time.Now().Truncate(time.Second)
	ago := func(m int) time.Time { return now.Add(-time.Duration(m) * time.Minute) }
	// Partition 0: records at 50, 40, 30, 20 min ago; retention removes
	// the first two. Partition 1 holds a record from before the window:
	// nothing of the window was deleted there.
	for i, m := range []int{50, 40, 30, 20} {
		id := fmt.Sprintf("p0-%d", i)
		f.row(id, "PUBLISHED", ago(m+1), ptrTime(ago(m)))
		f.produce(rec(topic, 0, id, ago(m)))
	}
	f.produce(rec(topic, 1, "ancient", now.Add(-3*time.Hour)))
	f.row("lost-late", "PUBLISHED", ago(26), ptrTime(ago(25)))                // after the first retained record: judged
	f.row("lost-early", "PUBLISHED", ago(36), ptrTime(ago(35)))               // before it: cannot be judged
	f.row("edge", "PUBLISHED", ago(31), ptrTime(ago(30).Add(30*time.Second))) // within grace after it
	f.deleteBefore(topic, 0, 2)

	cfg := auditCfg(topic)
	a := f.startAudit(cfg, func() time.Time { return now })
	r := compare(t, a)
	if got := ids(r.Missing); !reflect.DeepEqual(got, []string{"lost-late"}) {
		t.Errorf("missing %v, want [lost-late]: rows published before the earliest retained record are not judged", got)
	}
	if want := 30 * 60.0; r.WindowSeconds != want {
		t.Errorf("window_seconds = %v, want %v (back to the earliest retained record)", r.WindowSeconds, want)
	}
	if s := a.Stats(); s.Span != 30*time.Minute {
		t.Errorf("stats span %v, want 30m", s.Span)
	}

	// A partition whose every record was deleted: nothing before the
	// start can be judged on any partition.
	f.deleteBefore(topic, 1, 1)
	b := f.startAudit(cfg, func() time.Time { return now })
	r = compare(t, b)
	if len(r.Missing) != 0 || r.WindowSeconds != 0 {
		t.Errorf("all of a partition deleted: missing %v, window %v s; want none, 0", ids(r.Missing), r.WindowSeconds)
	}
	// The window reaches back again as time passes: from the start on,
	// the tailer reads every record live.
	later := now.Add(10 * time.Minute)
	b.setClock(func() time.Time { return later })
	f.row("lost-after-start", "PUBLISHED", now.Add(2*time.Minute), ptrTime(now.Add(3*time.Minute)))
	r = compare(t, b)
	if got := ids(r.Missing); !reflect.DeepEqual(got, []string{"lost-after-start"}) || r.WindowSeconds != 600 {
		t.Errorf("10 min after start: missing %v, window %v s; want [lost-after-start], 600", got, r.WindowSeconds)
	}
}

// TestAuditCompaction, the same for compacted topics: with the event id in
// a header, compaction may have removed any record read at start, so only
// what the tailer reads live is judged; with the id in the key the newest
// record of each id survives, so the whole window is judged.
func TestAuditCompaction(t *testing.T) { envs(t, testCompaction) }

func testCompaction(t *testing.T, f *fixture) {
	// segment.ms 100: every record below (a minute apart in record time)
	// rolls a segment, so the real broker's cleaner may compact all but
	// the last.
	topic := f.createTopic(1, map[string]string{"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.001"})
	now := time.Now().Truncate(time.Second)
	// Three events of one aggregate (the record key), each its own id,
	// then one of another aggregate.
	for i := 0; i < 4; i++ {
		id := fmt.Sprintf("agg-e%d", i)
		at := now.Add(time.Duration(i-30) * time.Minute)
		f.row(id, "PUBLISHED", at.Add(-time.Second), ptrTime(at))
		r := rec(topic, 0, id, at)
		r.Key = []byte("aggregate-1")
		if i == 3 {
			r.Key = []byte("aggregate-0")
		}
		f.produce(r) // one batch each, so compaction can drop the first ones
	}
	f.compact(topic, 4)
	cfg := auditCfg(topic)
	a := f.startAudit(cfg, func() time.Time { return now })
	r := compare(t, a)
	if len(r.Missing) != 0 || r.WindowSeconds != 0 {
		t.Errorf("compacted, id in a header: missing %v, window %v s; want none, 0", ids(r.Missing), r.WindowSeconds)
	}

	cfg.EventID = "key"
	f.row("aggregate-1", "PUBLISHED", now.Add(-20*time.Minute), ptrTime(now.Add(-20*time.Minute)))
	f.row("aggregate-2", "PUBLISHED", now.Add(-20*time.Minute), ptrTime(now.Add(-20*time.Minute)))
	b := f.startAudit(cfg, func() time.Time { return now })
	r = compare(t, b)
	if f.env.Real() {
		// Kafka keeps the log start where it was, and the newest record
		// of each key: the whole window is judged.
		if r.WindowSeconds != 3600 {
			t.Errorf("compacted, id in the key: window %v s, want 3600", r.WindowSeconds)
		}
	} else if r.WindowSeconds < 20*60 {
		// kfake moves the log start to the first batch compaction keeps,
		// which the audit cannot tell from deletion: the window reaches
		// back to that record.
		t.Errorf("compacted, id in the key: window %v s, want at least the 20 minutes back to the rows", r.WindowSeconds)
	}
	if got := ids(r.Missing); !contains(got, "aggregate-2") || contains(got, "aggregate-1") {
		t.Errorf("compacted, id in the key: missing %v, want aggregate-2 and not aggregate-1", got)
	}
}

// compact has the broker compact topic until fewer than n records remain
// (kfake on demand; Kafka's cleaner, which the test broker runs every
// 500 ms), and fails if it never does: the test would prove nothing.
func (f *fixture) compact(topic string, n int) {
	f.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if f.kafka != nil {
			f.kafka.Compact()
		}
		if got := len(readAll(f.t, f, topic)); got < n {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the broker did not compact %s: still %d records", topic, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// readAll reads every record a topic holds (the brute-force side).
func readAll(t *testing.T, f *fixture, topics ...string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := f.admin()
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[topicPartition]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok && s.Offset < o.Offset {
			want[topicPartition{o.Topic, o.Partition}] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.env.Brokers()...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read all of %v: %v (left %v)", topics, ctx.Err(), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			tp := topicPartition{r.Topic, r.Partition}
			if r.Offset+1 >= want[tp] {
				delete(want, tp)
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}

// TestAuditBacklogByPublicationTime: rows are chosen by when
// they were published, and unpublished rows of any age are judged.
func TestAuditBacklogByPublicationTime(t *testing.T) {
	f := newFixture(t)
	now := time.Now().Truncate(time.Second)
	f.row("backlog-lost", "PUBLISHED", now.Add(-2*time.Hour), ptrTime(now.Add(-5*time.Minute)))
	f.row("backlog-ok", "PUBLISHED", now.Add(-2*time.Hour), ptrTime(now.Add(-5*time.Minute)))
	f.row("backlog-unacked", "CLAIMED", now.Add(-3*time.Hour), nil)
	// Pending, never claimed, created before the window: a live relay did
	// not send it, and a backlog is not read whole.
	f.row("backlog-pending", "PENDING", now.Add(-3*time.Hour), nil)
	f.row("old-published", "PUBLISHED", now.Add(-3*time.Hour), ptrTime(now.Add(-2*time.Hour)))
	f.row("old-dead", "ABANDONED", now.Add(-20*time.Minute), nil)
	f.produce(rec("messages", 0, "backlog-ok", now.Add(-5*time.Minute)), rec("messages", 1, "backlog-unacked", now.Add(-10*time.Minute)),
		rec("messages", 1, "backlog-pending", now.Add(-10*time.Minute)),
		rec("messages", 0, "old-dead", now.Add(-15*time.Minute)))
	a := f.startAudit(auditCfg("messages", "messages.retry"), func() time.Time { return now })
	r := compare(t, a)
	wantIDs(t, "missing", r.Missing, "backlog-lost")
	wantIDs(t, "unmarked", r.Unmarked, "backlog-unacked")
	wantIDs(t, "dead in broker", r.Dead, "old-dead")
}

// TestAuditCatchesUp: a comparison judges only once the tailer has read
// what the topics held when it began. With the tailer paused (a tailer
// fallen behind), the comparison fails and keeps no findings instead of
// reporting the unread record's row as lost; resumed, it finds it.
func TestAuditCatchesUp(t *testing.T) {
	f := newFixture(t)
	now := time.Now().Truncate(time.Second)
	a := f.startAudit(auditCfg("messages", "messages.retry"), nil)
	a.client.PauseFetchTopics("messages", "messages.retry")
	f.row("unread", "PUBLISHED", now.Add(-10*time.Minute), ptrTime(now.Add(-9*time.Minute)))
	f.produce(rec("messages", 0, "unread", now.Add(-9*time.Minute)))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err := a.Compare(ctx)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "behind") {
		t.Fatalf("compare with the tailer behind: err %v, findings %v; want an error saying it is behind", err, ids(a.Report().Missing))
	}
	if a.Stats().Compared {
		t.Error("a failed comparison left findings")
	}
	a.client.ResumeFetchTopics("messages", "messages.retry")
	if r := compare(t, a); len(r.Missing) != 0 {
		t.Errorf("after catching up: missing %v, want none", ids(r.Missing))
	}
}
