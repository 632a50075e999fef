package cdc

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/collectors/audit"
	"github.com/outbox-exporter/outbox_exporter/collectors/cdc/cdctest"
	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// topicReader reads the routed topics from the start and keeps, per
// topic, the "id" header of every record in order.
type topicReader struct {
	mu  sync.Mutex
	ids map[string][]string
}

func readTopics(t *testing.T, b *kafkatest.Broker, topics ...string) *topicReader {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Brokers()...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableClientMetrics(),
		kgo.MetadataMinAge(250*time.Millisecond), kgo.MetadataMaxAge(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := &topicReader{ids: map[string][]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(rec *kgo.Record) {
				id := ""
				for _, h := range rec.Headers {
					if h.Key == "id" {
						id = string(h.Value)
					}
				}
				r.mu.Lock()
				r.ids[rec.Topic] = append(r.ids[rec.Topic], id)
				r.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return r
}

func (r *topicReader) get(topic string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids[topic]...)
}

// outboxSchema is Debezium's outbox table as its EventRouter expects it,
// with created_at for the exporter; outbox keeps its rows,
// outbox_transient is a delete-after-insert outbox (Debezium's
// recommendation): each event is inserted and deleted in one
// transaction, so the table is always empty.
const outboxSchema = `
CREATE TABLE outbox (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  aggregatetype text NOT NULL,
  aggregateid text NOT NULL,
  type text NOT NULL,
  payload text,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ON outbox (created_at);
CREATE TABLE outbox_transient (LIKE outbox INCLUDING ALL);
CREATE TABLE debezium_heartbeat (id int PRIMARY KEY, at timestamptz NOT NULL);
`

func insertEvents(t *testing.T, s *server, table, aggregate string, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for i := 0; i < n; i++ {
		var id string
		var err error
		if table == "outbox_transient" {
			err = s.admin.QueryRow(context.Background(), `WITH ins AS (
				INSERT INTO outbox_transient (aggregatetype, aggregateid, type, payload) VALUES ($1, $2, 'created', '{"n":1}') RETURNING id)
				SELECT id::text FROM ins`, aggregate, fmt.Sprint(i)).Scan(&id)
			if err == nil {
				_, err = s.admin.Exec(context.Background(), `DELETE FROM outbox_transient WHERE id = $1`, id)
			}
		} else {
			err = s.admin.QueryRow(context.Background(), `INSERT INTO outbox (aggregatetype, aggregateid, type, payload)
				VALUES ($1, $2, 'created', '{"n":1}') RETURNING id::text`, aggregate, fmt.Sprint(i)).Scan(&id)
		}
		if err != nil {
			t.Fatalf("insert into %s: %v", table, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// The capture pipeline end to end, with the exporter watching Debezium's
// slot: events are routed with their ids and the audit finds nothing
// wrong (and finds the one event routed elsewhere); with Connect stopped
// the slot is inactive, its lag grows exactly with the WAL the writes
// add and with the time passing, and the alerts fire on those values;
// restarted, the lag returns to ~0 and every event written meanwhile
// arrives; left behind past max_slot_wal_keep_size the slot is lost. A
// delete-after-insert outbox rides the same slot: its table stays empty
// while the slot signals page.
func TestDebeziumOutbox(t *testing.T) {
	r := startDebeziumRig(t)
	r.checkRunning(t)
	written := r.checkStopped(t)
	r.checkRestarted(t, written)
	r.checkLost(t)
}

// debeziumRig is the pipeline of TestDebeziumOutbox: a server with both
// outboxes, Debezium's Connect streaming from slot, the exporter's slot
// and keeping-outbox collectors, a reader of the routed topics and the
// audit of the orders topic. Its steps run in order on the same rig.
type debeziumRig struct {
	s       *server
	slot    string
	entries map[string]*config.CDC
	c       *Collector
	oc      *outbox.Collector
	cn      *connect
	reader  *topicReader
	au      *audit.Auditor
	orders  []string // ids written to the keeping outbox while Connect ran
}

// startDebeziumRig starts the pipeline and waits until Debezium has
// created its slot and streams from it.
func startDebeziumRig(t *testing.T) *debeziumRig {
	b := kafkatest.Shared(t)
	createTopics(t, b, "outbox.event.orders", "outbox.event.payments", "outbox.event.elsewhere")
	s := startServer(t, cdctest.Options{WALSegmentMB: 1, Settings: map[string]string{"track_commit_timestamp": "on"}})
	s.exec(t, outboxSchema)
	r := &debeziumRig{s: s, slot: "debezium_outbox"}
	r.entries = map[string]*config.CDC{"orders": {Database: "main", Slot: r.slot, Deadline: 2 * time.Second, Outbox: "outbox"}}
	r.c = newCollector(s, r.entries)
	r.oc = keptOutbox(s, r.c)
	r.cn = newConnect(t, b, s.cluster.Port, "postgres", r.slot, []string{"public.outbox", "public.outbox_transient"})
	r.cn.Start()
	waitFor(t, "Debezium creates its slot and streams from it", 3*time.Minute, func() (bool, string) {
		m, err := collect(t, r.c)
		if err != nil {
			return false, err.Error() + "\n" + r.cn.Status(context.Background()) + "\n" + r.cn.Log()
		}
		return m.get(t, "outbox_cdc_slot_active", "orders") == 1, r.cn.Status(context.Background()) + "\n" + r.cn.Log()
	})
	r.reader = readTopics(t, b, "outbox.event.orders", "outbox.event.payments", "outbox.event.elsewhere")
	r.au = startAudit(t, s, b)
	return r
}

// checkRunning: routed with ids, audited clean, lag ~0.
func (r *debeziumRig) checkRunning(t *testing.T) {
	s, au := r.s, r.au
	orders := insertEvents(t, s, "outbox", "orders", 20)
	payments := insertEvents(t, s, "outbox_transient", "payments", 10)
	r.orders = orders
	waitTopics(t, r.reader, r.cn, map[string][]string{"outbox.event.orders": orders, "outbox.event.payments": payments})
	waitFor(t, "the audit judges every event and finds nothing wrong", time.Minute, func() (bool, string) {
		if err := au.Compare(context.Background()); err != nil {
			return false, err.Error()
		}
		st := au.Stats()
		return st.Compared && st.Checked == uint64(len(orders)) && st.Missing == 0 && st.Unmarked == 0 && st.Duplicates == 0, fmt.Sprintf("%+v", st)
	})
	// The negative control: an event the router sends to a topic the
	// audit does not watch is missing in the broker for the audit.
	insertEvents(t, s, "outbox", "elsewhere", 1)
	waitFor(t, "the audit finds the event routed elsewhere", time.Minute, func() (bool, string) {
		if err := au.Compare(context.Background()); err != nil {
			return false, err.Error()
		}
		st := au.Stats()
		return st.Missing == 1 && st.Unmarked == 0, fmt.Sprintf("%+v", st)
	})
	waitCaughtUp(t, r.c, r.cn, "while Connect runs")
	waitNonePending(t, r.c, r.oc, r.cn, "while Connect runs")
}

// checkStopped: Connect stopped, inactive, and the lag grows with the
// writes. It returns the ids written to the keeping outbox meanwhile.
func (r *debeziumRig) checkStopped(t *testing.T) []string {
	s, c := r.s, r.c
	r.cn.Stop()
	waitFor(t, "stopped connector's slot reads inactive", time.Minute, func() (bool, string) {
		m, err := collect(t, c)
		return err == nil && m.get(t, "outbox_cdc_slot_active", "orders") == 0, fmt.Sprint(m, err)
	})
	snaps, written := writeWhileStopped(t, s, c, r.slot, r.entries["orders"].Deadline)
	var rows int
	if err := s.admin.QueryRow(context.Background(), `SELECT count(*) FROM outbox_transient`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("the delete-after-insert outbox holds %d rows (%v)", rows, err)
	}
	checkAlertsOnStoppedConnector(t, r.entries, snaps)
	// The keeping outbox: exactly the rows written while stopped are
	// pending (all were committed after the slot's confirmed time, which
	// the collections while caught up placed before the first of them).
	if n, err := pendingRows(t, c, r.oc); err != nil || n != float64(len(written)) {
		t.Errorf("Connect stopped: %v rows of the keeping outbox pending (%v), want the %d written meanwhile", n, err, len(written))
	}
	return written
}

// checkRestarted: ~0 again, and everything written meanwhile arrives.
func (r *debeziumRig) checkRestarted(t *testing.T, written []string) {
	au := r.au
	r.cn.Start()
	waitCaughtUp(t, r.c, r.cn, "after Connect restarted")
	waitNonePending(t, r.c, r.oc, r.cn, "after Connect restarted")
	waitTopics(t, r.reader, r.cn, map[string][]string{"outbox.event.orders": append(r.orders, written...)})
	if err := au.Compare(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := au.Stats(); st.Missing != 1 || st.Unmarked != 0 {
		t.Errorf("after the restart the audit finds %+v; want only the event routed elsewhere missing", st)
	}
	t.Logf("duplicates after a graceful restart: %d", au.Stats().Duplicates)
}

// checkLost: left behind past max_slot_wal_keep_size, the slot is lost.
func (r *debeziumRig) checkLost(t *testing.T) {
	s := r.s
	r.cn.Stop()
	s.exec(t, `ALTER SYSTEM SET max_slot_wal_keep_size = '2MB'`)
	s.exec(t, `SELECT pg_reload_conf()`)
	waitFor(t, "the slot's WAL is lost", 2*time.Minute, func() (bool, string) {
		s.exec(t, `INSERT INTO outbox_transient (aggregatetype, aggregateid, type, payload) SELECT 'bulk', g::text, 'x', repeat(md5(g::text), 30) FROM generate_series(1, 2000) g`)
		s.exec(t, `DELETE FROM outbox_transient`)
		s.exec(t, `CHECKPOINT`)
		m, err := collect(t, r.c)
		if err != nil {
			return false, err.Error()
		}
		return m.get(t, "outbox_cdc_slot_wal_status", "orders", "status=lost") == 1 &&
			m.get(t, "outbox_cdc_slot_wal_status", "orders", "status=reserved") == 0, fmt.Sprint(m)
	})
}

// writeWhileStopped writes one event to each outbox at a time with the
// connector stopped, collecting after each, until the lag is past twice
// the deadline. The lag in bytes must be exactly the WAL the server wrote
// past the slot, growing with every write, and the lag in seconds must
// grow exactly as the server's clock: the slot's confirmed time stays put.
// It returns the collections and the ids written to the keeping outbox.
func writeWhileStopped(t *testing.T, s *server, c *Collector, slot string, deadline time.Duration) ([]metrics, []string) {
	t.Helper()
	conf := s.confirmed(t, slot)
	var snaps []metrics
	var first Sample
	var lastBytes float64
	var written []string
	for i := 0; ; i++ {
		written = append(written, insertEvents(t, s, "outbox", "orders", 1)...)
		insertEvents(t, s, "outbox_transient", "payments", 1)
		m, err := collect(t, c)
		if err != nil {
			t.Fatal(err)
		}
		h := c.History().Samples()
		now := h[len(h)-1]
		if i == 0 {
			first = now
		}
		bytes, sec := m.get(t, "outbox_cdc_slot_lag_bytes", "orders"), m.get(t, "outbox_cdc_slot_lag_seconds", "orders")
		if bytes != float64(now.LSN-conf) || bytes <= lastBytes {
			t.Fatalf("write %d: lag %v bytes; the server is %v bytes past the slot, %v before", i, bytes, now.LSN-conf, lastBytes)
		}
		lastBytes = bytes
		st, _ := c.Last("orders")
		grown, atFirst := 0.0, sec
		if i > 0 {
			atFirst = snaps[0].get(t, "outbox_cdc_slot_lag_seconds", "orders")
			grown = sec - atFirst
		}
		if want := now.At.Sub(st.ConfirmedAt).Seconds(); sec != want || math.Abs(grown-now.At.Sub(first.At).Seconds()) > 1e-6 {
			t.Fatalf("write %d: lag %v s, want %v (the slot confirmed at %v); %v since the first write, lag %v s at it",
				i, sec, want, st.ConfirmedAt, now.At.Sub(first.At), atFirst)
		}
		snaps = append(snaps, m)
		if i >= 5 && sec > 2*deadline.Seconds() {
			break
		}
		if i > 200 {
			t.Fatalf("lag did not pass twice the deadline after %d writes: %v", i, m)
		}
		time.Sleep(100 * time.Millisecond) // spacing between writes, not a verdict
	}
	return snaps, written
}

// checkAlertsOnStoppedConnector runs the generated rules on the values
// the exporter reported while Connect was stopped, one collection per
// evaluation minute: the lag alert fires one minute after the first
// collection over the deadline, the inactive alert at five minutes, and
// neither WAL alert fires.
func checkAlertsOnStoppedConnector(t *testing.T, entries map[string]*config.CDC, snaps []metrics) {
	t.Helper()
	over := -1
	for i, m := range snaps {
		if m.get(t, "outbox_cdc_slot_lag_seconds", "orders") > entries["orders"].Deadline.Seconds() && over < 0 {
			over = i
		}
	}
	if over < 0 {
		t.Fatal("no collection over the deadline")
	}
	cfg := &config.Config{CDC: entries, Alerting: config.Alerting{Selector: `job="outbox_exporter"`}}
	cases := []alertCase{
		{alert: "OutboxCDCSlotLagAboveDeadline", at: over + 1, cdc: "orders", sev: "critical"},
		{alert: "OutboxCDCSlotInactive", at: 4},
		{alert: "OutboxCDCSlotInactive", at: 5, cdc: "orders", sev: "warning"},
		{alert: "OutboxCDCSlotWALUnreserved", at: 6},
		{alert: "OutboxCDCSlotWALLost", at: 6},
	}
	if over > 0 {
		cases = append(cases, alertCase{alert: "OutboxCDCSlotLagAboveDeadline", at: over})
	}
	runPromtool(t, cfg, snaps, 10, cases)
}

func waitCaughtUp(t *testing.T, c *Collector, cn *connect, when string) {
	t.Helper()
	waitFor(t, "slot active with lag ~0 "+when, 3*time.Minute, func() (bool, string) {
		m, err := collect(t, c)
		if err != nil {
			return false, err.Error()
		}
		a, sec := m.get(t, "outbox_cdc_slot_active", "orders"), m.get(t, "outbox_cdc_slot_lag_seconds", "orders")
		// ~0: within the connector's heartbeat and offset flush (1 s).
		return a == 1 && sec < 2, fmt.Sprint(m) + "\n" + cn.Status(context.Background()) + "\n" + cn.Log()
	})
}

func waitTopics(t *testing.T, r *topicReader, cn *connect, want map[string][]string) {
	t.Helper()
	waitFor(t, "events routed", 2*time.Minute, func() (bool, string) {
		var state []string
		ok := true
		for topic, ids := range want {
			got := r.get(topic)
			state = append(state, fmt.Sprintf("%s %d/%d", topic, len(got), len(ids)))
			ok = ok && len(got) >= len(ids)
		}
		return ok, strings.Join(state, ", ") + "\n" + cn.Log()
	})
	for topic, ids := range want {
		if got := r.get(topic); fmt.Sprint(got) != fmt.Sprint(ids) {
			t.Errorf("%s: ids on the topic %v\nwant, in commit order, %v", topic, got, ids)
		}
	}
}

func createTopics(t *testing.T, b *kafkatest.Broker, topics ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Brokers()...), kgo.DisableClientMetrics())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, 1, 1, nil, topics...); err != nil {
		t.Fatal(err)
	}
}

// startAudit audits the keeping outbox against the orders topic. Its
// rows are published when committed (the connector takes them from the
// WAL), so published_at is created_at: a row whose id never reaches the
// topic within grace is silent loss.
func startAudit(t *testing.T, s *server, b *kafkatest.Broker) *audit.Auditor {
	t.Helper()
	o := &config.Outbox{Database: "main", Table: "public.outbox", ID: "id", CreatedAt: "created_at", PublishedAt: "created_at", Deadline: time.Minute}
	ac := &config.Audit{Kafka: "main", Topics: []string{"outbox.event.orders"}, EventID: "header:id", Sample: 1,
		Grace: 2 * time.Second, Window: time.Hour, Interval: time.Hour}
	au, err := audit.New("outbox", ac, o, &config.Kafka{Brokers: b.Brokers()}, s.ro, testutil.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	au.SetCompareInterval(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	au.Start(ctx)
	t.Cleanup(func() { cancel(); au.Close() })
	waitFor(t, "the audit has read its topics", time.Minute, func() (bool, string) { return au.Ready(), "" })
	return au
}

// keptOutbox is the collector of the keeping outbox, published by the
// slot of c's entry "orders" and labelled by aggregate type.
func keptOutbox(s *server, c *Collector) *outbox.Collector {
	o := &config.Outbox{Database: "main", Table: "public.outbox", ID: "id", CreatedAt: "created_at",
		Labels: []config.Label{{Name: "aggregate", Column: "aggregatetype"}}, Deadline: time.Minute,
		MaxLabelValues: config.DefaultMaxLabelValues, MaxCount: config.DefaultMaxCount}
	oc := outbox.NewCollector("outbox", o, s.ro, testutil.Quiet())
	oc.PublishedBySlot(func(ctx context.Context) (outbox.Confirmed, error) {
		st, err := c.State(ctx, "orders")
		return outbox.Confirmed{At: st.ConfirmedAt, LowerBound: st.LowerBound}, err
	}, outbox.DefaultBehindLookback)
	return oc
}

// pendingRows collects the slot, then the outbox it publishes, and
// returns the outbox's pending rows over every label set.
func pendingRows(t *testing.T, c *Collector, oc *outbox.Collector) (float64, error) {
	t.Helper()
	if _, err := collect(t, c); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := make(chan prometheus.Metric, 256)
	err := oc.Update(ctx, ch)
	close(ch)
	n := 0.0
	for m := range ch {
		if testutil.IsMetric(m, "outbox_events") && testutil.LabelOf(t, m, "state") == "pending" {
			n += testutil.MetricValue(t, m)
		}
	}
	return n, err
}

// waitNonePending waits until the keeping outbox, full of kept rows,
// reads nothing pending: the connector has confirmed them all.
func waitNonePending(t *testing.T, c *Collector, oc *outbox.Collector, cn *connect, when string) {
	t.Helper()
	waitFor(t, "no row of the keeping outbox pending "+when, 2*time.Minute, func() (bool, string) {
		n, err := pendingRows(t, c, oc)
		return err == nil && n == 0, fmt.Sprintf("%v pending, %v\n%s", n, err, cn.Status(context.Background()))
	})
}
