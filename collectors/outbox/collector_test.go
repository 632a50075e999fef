package outbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// obSetup creates a database with the given schema and a read-only pool
// on it opened the way the exporter opens it.
func obSetup(t *testing.T, schema string) (*pgtest.DB, *pgxpool.Pool, *config.Database) {
	t.Helper()
	db := pgtest.New(t)
	db.Exec(t, schema)
	dbc := &config.Database{DSN: config.Secret(db.URL), MaxConnections: 2,
		StatementTimeout: 30 * time.Second, LockTimeout: 30 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pg.Open(ctx, dbc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return db, pool, dbc
}

// obDefaults fills the defaults config.Parse would.
func obDefaults(o *config.Outbox) *config.Outbox {
	if o.MaxLabelValues == 0 {
		o.MaxLabelValues = config.DefaultMaxLabelValues
	}
	if o.MaxCount == 0 {
		o.MaxCount = config.DefaultMaxCount
	}
	if o.Deadline == 0 {
		o.Deadline = 5 * time.Minute
	}
	if o.ID == "" {
		o.ID = "id"
	}
	if o.CreatedAt == "" {
		o.CreatedAt = "created_at"
	}
	return o
}

// obScrape runs one Update and returns what it sent.
func obScrape(t *testing.T, c *Collector) []prometheus.Metric {
	t.Helper()
	ms, err := obTryScrape(c, 10*time.Second)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	return ms
}

func obTryScrape(c *Collector, timeout time.Duration) ([]prometheus.Metric, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ch := make(chan prometheus.Metric, 1024)
	err := c.Update(ctx, ch)
	close(ch)
	var ms []prometheus.Metric
	for m := range ch {
		ms = append(ms, m)
	}
	return ms, err
}

// obStatic exposes metrics already collected, so that CollectAndCompare
// does not scrape again (a scrape advances the counters).
type obStatic []prometheus.Metric

func (s obStatic) Describe(ch chan<- *prometheus.Desc) {}
func (s obStatic) Collect(ch chan<- prometheus.Metric) {
	for _, m := range s {
		ch <- m
	}
}

func obCompare(t *testing.T, ms []prometheus.Metric, want string, names ...string) {
	t.Helper()
	if err := promtestutil.CollectAndCompare(obStatic(ms), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// obValue returns the value of the metric name with the given labels
// (a subset), failing if there is not exactly one.
func obValue(t *testing.T, ms []prometheus.Metric, name string, labels map[string]string) float64 {
	t.Helper()
	var found []float64
	for _, m := range ms {
		if !strings.Contains(m.Desc().String(), `"`+name+`"`) {
			continue
		}
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		have := map[string]string{}
		for _, l := range pb.Label {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range labels {
			ok = ok && have[k] == v
		}
		if !ok {
			continue
		}
		switch {
		case pb.Gauge != nil:
			found = append(found, pb.Gauge.GetValue())
		case pb.Counter != nil:
			found = append(found, pb.Counter.GetValue())
		case pb.Histogram != nil:
			found = append(found, float64(pb.Histogram.GetSampleCount()))
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s%v: found %d series, want 1", name, labels, len(found))
	}
	return found[0]
}

func obNear(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if got < want-tol || got > want+tol {
		t.Errorf("%s = %v, want %v ± %v", what, got, want, tol)
	}
}

const obStatusSchema = `
CREATE TABLE outbox (
  id bigserial PRIMARY KEY,
  created_at timestamptz NOT NULL DEFAULT now(),
  event_type text NOT NULL,
  topic text,
  status text NOT NULL DEFAULT 'PENDING',
  published_at timestamptz,
  lease_until timestamptz,
  attempts int NOT NULL DEFAULT 0,
  last_error text
);`

func obStatusOutbox() *config.Outbox {
	return obDefaults(&config.Outbox{
		Table: "public.outbox", Labels: []config.Label{{Name: "event_type", Column: "event_type"}, {Name: "destination", Column: "topic"}},
		Status: "status", Pending: []string{"PENDING"}, InFlight: []string{"CLAIMED"}, Published: []string{"PUBLISHED"},
		Dead: []string{"ABANDONED"}, Unknown: []string{"UNSURE"},
		PublishedAt: "published_at", LeaseUntil: "lease_until", Attempts: "attempts", LastError: "last_error",
		Deadline: 5 * time.Minute, Deadlines: map[string]time.Duration{"order.paid": 30 * time.Second},
	})
}

func TestOutboxStatusStyle(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema)
	db.Exec(t, `INSERT INTO outbox (created_at, event_type, topic, status, lease_until, attempts, published_at) VALUES
	  (now() - interval '10 minutes', 'order.created', 'orders', 'PENDING', NULL, 0, NULL),
	  (now() - interval '1 minute',   'order.created', 'orders', 'PENDING', NULL, 2, NULL),
	  (now() - interval '2 minutes',  'order.created', 'orders', 'CLAIMED', now() + interval '1 hour', 1, NULL),
	  (now() - interval '20 minutes', 'order.created', 'orders', 'CLAIMED', now() - interval '1 minute', 1, NULL),
	  (now() - interval '3 minutes',  'order.created', 'orders', 'CLAIMED', now() - interval '1 minute', 0, NULL),
	  (now() - interval '4 minutes',  'order.created', 'orders', 'UNSURE', now() + interval '1 hour', 1, NULL),
	  (now() - interval '1 day',      'order.created', 'orders', 'ABANDONED', NULL, 9, NULL),
	  (now() - interval '1 minute',   'order.paid',    'payments', 'PENDING', NULL, 0, NULL),
	  (now() - interval '10 seconds', 'order.paid',    'payments', 'PENDING', NULL, 0, NULL),
	  (now() - interval '1 day',      'order.paid',    'payments', 'PUBLISHED', NULL, 1, now() - interval '23 hours'),
	  (now() - interval '1 minute',   'order.paid',    'payments', 'WEIRD', NULL, 0, NULL)`)
	c := NewCollector("messages", obStatusOutbox(), pool, testutil.Quiet())
	ms := obScrape(t, c)
	obCompare(t, ms, `
# HELP outbox_events Unpublished and dead rows of the outbox by state (pending, in_flight, lease_expired, dead). A lower bound while outbox_events_capped is 1.
# TYPE outbox_events gauge
outbox_events{destination="orders",event_type="order.created",outbox="messages",state="dead"} 1
outbox_events{destination="orders",event_type="order.created",outbox="messages",state="in_flight"} 2
outbox_events{destination="orders",event_type="order.created",outbox="messages",state="lease_expired"} 2
outbox_events{destination="orders",event_type="order.created",outbox="messages",state="pending"} 2
outbox_events{destination="payments",event_type="order.paid",outbox="messages",state="dead"} 0
outbox_events{destination="payments",event_type="order.paid",outbox="messages",state="in_flight"} 0
outbox_events{destination="payments",event_type="order.paid",outbox="messages",state="lease_expired"} 0
outbox_events{destination="payments",event_type="order.paid",outbox="messages",state="pending"} 2
# HELP outbox_past_deadline_events Unpublished rows older than their deadline. A lower bound while outbox_events_capped is 1.
# TYPE outbox_past_deadline_events gauge
outbox_past_deadline_events{destination="orders",event_type="order.created",outbox="messages"} 2
outbox_past_deadline_events{destination="payments",event_type="order.paid",outbox="messages"} 1
# HELP outbox_retried_events Unpublished rows with attempts > 0. A lower bound while outbox_events_capped is 1.
# TYPE outbox_retried_events gauge
outbox_retried_events{destination="orders",event_type="order.created",outbox="messages"} 4
outbox_retried_events{destination="payments",event_type="order.paid",outbox="messages"} 0
# HELP outbox_unknown_result_events Unpublished rows whose publish result is unknown (status in unknown, lease expired after an attempt, or unknown_when): the broker may hold them, so a retry may duplicate them.
# TYPE outbox_unknown_result_events gauge
outbox_unknown_result_events{destination="orders",event_type="order.created",outbox="messages"} 2
outbox_unknown_result_events{destination="payments",event_type="order.paid",outbox="messages"} 0
# HELP outbox_deadline_seconds The configured notification deadline of these events in seconds.
# TYPE outbox_deadline_seconds gauge
outbox_deadline_seconds{destination="orders",event_type="order.created",outbox="messages"} 300
outbox_deadline_seconds{destination="payments",event_type="order.paid",outbox="messages"} 30
# HELP outbox_events_capped 1 when a count of this outbox exceeded max_count at the last collection: the counts are then lower bounds per label set and state, never 0 where a row exists (claimed rows and unknown results exact up to max_count; pending and dead rows up to max_count divided among the label sets), and the oldest ages stay exact (but for one logged case, see the oldest age). It keeps a collection cheap during a huge backlog.
# TYPE outbox_events_capped gauge
outbox_events_capped{outbox="messages"} 0
# HELP outbox_lease_expirations_total Distinct (row, lease) expiries observed since the exporter started; each expired lease is counted once.
# TYPE outbox_lease_expirations_total counter
outbox_lease_expirations_total{outbox="messages"} 0
# HELP outbox_published_events_total Rows seen becoming published (published_at set) since the exporter started.
# TYPE outbox_published_events_total counter
outbox_published_events_total{destination="orders",event_type="order.created",outbox="messages"} 0
outbox_published_events_total{destination="payments",event_type="order.paid",outbox="messages"} 0
`, "outbox_events", "outbox_past_deadline_events", "outbox_retried_events", "outbox_unknown_result_events",
		"outbox_deadline_seconds", "outbox_events_capped", "outbox_lease_expirations_total", "outbox_published_events_total")
	// The dead row is a day old but not unpublished: the oldest is the
	// 20-minute lease_expired row.
	obNear(t, "oldest order.created", obValue(t, ms, "outbox_oldest_pending_age_seconds", map[string]string{"event_type": "order.created"}), 1200, 5)
	obNear(t, "oldest order.paid", obValue(t, ms, "outbox_oldest_pending_age_seconds", map[string]string{"event_type": "order.paid"}), 60, 5)
}

func TestOutboxIntegerStatusClaimedAtLease(t *testing.T) {
	db, pool, _ := obSetup(t, `CREATE TABLE jobs (
	  job_id uuid PRIMARY KEY DEFAULT gen_random_uuid(), made timestamp NOT NULL, st smallint NOT NULL,
	  claimed timestamp, tries int8);
	  INSERT INTO jobs (made, st, claimed, tries) VALUES
	   (localtimestamp - interval '2 minutes', 0, NULL, 0),
	   (localtimestamp - interval '2 minutes', 1, localtimestamp - interval '30 seconds', 1),
	   (localtimestamp - interval '9 minutes', 1, localtimestamp - interval '5 minutes', 1),
	   (localtimestamp - interval '9 minutes', 2, localtimestamp - interval '5 minutes', 1),
	   (localtimestamp - interval '9 minutes', 3, NULL, 5)`)
	o := obDefaults(&config.Outbox{Table: "jobs", ID: "job_id", CreatedAt: "made", Status: "st",
		Pending: []string{"0"}, InFlight: []string{"1"}, Published: []string{"2"}, Dead: []string{"3"},
		ClaimedAt: "claimed", LeaseTTL: 2 * time.Minute, Attempts: "tries", Deadline: 5 * time.Minute})
	c := NewCollector("jobs", o, pool, testutil.Quiet())
	ms := obScrape(t, c)
	obCompare(t, ms, `
# HELP outbox_events Unpublished and dead rows of the outbox by state (pending, in_flight, lease_expired, dead). A lower bound while outbox_events_capped is 1.
# TYPE outbox_events gauge
outbox_events{outbox="jobs",state="dead"} 1
outbox_events{outbox="jobs",state="in_flight"} 1
outbox_events{outbox="jobs",state="lease_expired"} 1
outbox_events{outbox="jobs",state="pending"} 1
# HELP outbox_unknown_result_events Unpublished rows whose publish result is unknown (status in unknown, lease expired after an attempt, or unknown_when): the broker may hold them, so a retry may duplicate them.
# TYPE outbox_unknown_result_events gauge
outbox_unknown_result_events{outbox="jobs"} 1
# HELP outbox_past_deadline_events Unpublished rows older than their deadline. A lower bound while outbox_events_capped is 1.
# TYPE outbox_past_deadline_events gauge
outbox_past_deadline_events{outbox="jobs"} 1
# HELP outbox_lease_expirations_total Distinct (row, lease) expiries observed since the exporter started; each expired lease is counted once.
# TYPE outbox_lease_expirations_total counter
outbox_lease_expirations_total{outbox="jobs"} 0
`, "outbox_events", "outbox_unknown_result_events", "outbox_past_deadline_events", "outbox_lease_expirations_total")
	// timestamp without time zone ages the same as timestamptz.
	obNear(t, "oldest", obValue(t, ms, "outbox_oldest_pending_age_seconds", nil), 540, 5)
	// The in-flight row's lease (claimed_at + lease_ttl) runs out.
	db.Exec(t, `UPDATE jobs SET claimed = localtimestamp - interval '2 minutes' - interval '1 millisecond'
	  WHERE st = 1 AND claimed > localtimestamp - interval '1 minute'`)
	if v := obValue(t, obScrape(t, c), "outbox_lease_expirations_total", nil); v != 1 {
		t.Errorf("lease expirations after claimed_at + lease_ttl passed = %v, want 1", v)
	}
	ms = obScrape(t, c)
	if v := obValue(t, ms, "outbox_lease_expirations_total", nil); v != 1 {
		t.Errorf("lease expirations on the next scrape = %v, want still 1", v)
	}
	if n := len(ms); n == 0 {
		t.Fatal("no metrics")
	}
	for _, m := range ms {
		if strings.Contains(m.Desc().String(), `fqName: "outbox_publish`) {
			t.Errorf("published metrics without published_at: %v", m.Desc())
		}
	}
}

// timestampStyleBefore is what the timestamp-style outbox of
// TestOutboxTimestampStyleAndPublishedCounters exports before anything is
// published: the counters start at 0 whatever was published before.
const timestampStyleBefore = `
# HELP outbox_events Unpublished and dead rows of the outbox by state (pending, in_flight, lease_expired, dead). A lower bound while outbox_events_capped is 1.
# TYPE outbox_events gauge
outbox_events{kind="a",outbox="ev",state="dead"} 0
outbox_events{kind="a",outbox="ev",state="in_flight"} 0
outbox_events{kind="a",outbox="ev",state="lease_expired"} 0
outbox_events{kind="a",outbox="ev",state="pending"} 1
outbox_events{kind="b",outbox="ev",state="dead"} 1
outbox_events{kind="b",outbox="ev",state="in_flight"} 0
outbox_events{kind="b",outbox="ev",state="lease_expired"} 1
outbox_events{kind="b",outbox="ev",state="pending"} 1
# HELP outbox_published_events_total Rows seen becoming published (published_at set) since the exporter started.
# TYPE outbox_published_events_total counter
outbox_published_events_total{kind="a",outbox="ev"} 0
outbox_published_events_total{kind="b",outbox="ev"} 0
`

// timestampStylePublished is what it exports once every unpublished row
// is published (the late commit included) and on each scrape after.
const timestampStylePublished = `
# HELP outbox_published_events_total Rows seen becoming published (published_at set) since the exporter started.
# TYPE outbox_published_events_total counter
outbox_published_events_total{kind="a",outbox="ev"} 1
outbox_published_events_total{kind="b",outbox="ev"} 2
# HELP outbox_published_late_events_total Of the rows seen becoming published, those published after their deadline.
# TYPE outbox_published_late_events_total counter
outbox_published_late_events_total{kind="a",outbox="ev"} 0
outbox_published_late_events_total{kind="b",outbox="ev"} 0
# HELP outbox_events Unpublished and dead rows of the outbox by state (pending, in_flight, lease_expired, dead). A lower bound while outbox_events_capped is 1.
# TYPE outbox_events gauge
outbox_events{kind="a",outbox="ev",state="dead"} 0
outbox_events{kind="a",outbox="ev",state="in_flight"} 0
outbox_events{kind="a",outbox="ev",state="lease_expired"} 0
outbox_events{kind="a",outbox="ev",state="pending"} 0
outbox_events{kind="b",outbox="ev",state="dead"} 1
outbox_events{kind="b",outbox="ev",state="in_flight"} 0
outbox_events{kind="b",outbox="ev",state="lease_expired"} 0
outbox_events{kind="b",outbox="ev",state="pending"} 0
`

func TestOutboxTimestampStyleAndPublishedCounters(t *testing.T) {
	db, pool, _ := obSetup(t, `CREATE TABLE ev (
	  id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(), kind text NOT NULL,
	  published_at timestamptz, dead_at timestamptz, lease_until timestamptz, attempts int DEFAULT 0);
	  INSERT INTO ev (created_at, kind, published_at) SELECT now() - interval '1 day', 'a', now() - interval '23 hours' FROM generate_series(1, 50);
	  INSERT INTO ev (created_at, kind) VALUES (now() - interval '1 minute', 'a'), (now() - interval '1 minute', 'b');
	  INSERT INTO ev (created_at, kind, dead_at) VALUES (now() - interval '1 hour', 'b', now());
	  INSERT INTO ev (created_at, kind, lease_until, attempts) VALUES (now() - interval '2 minutes', 'b', now() - interval '5 seconds', 1);`)
	o := obDefaults(&config.Outbox{Table: "ev", Labels: []config.Label{{Name: "kind", Column: "kind"}},
		PublishedAt: "published_at", DeadAt: "dead_at", LeaseUntil: "lease_until", Attempts: "attempts",
		Deadline: 90 * time.Second, Deadlines: map[string]time.Duration{"b": 10 * time.Minute}})
	c := NewCollector("ev", o, pool, testutil.Quiet())
	ms := obScrape(t, c)
	obCompare(t, ms, timestampStyleBefore, "outbox_events", "outbox_published_events_total")

	// Publish: "a" on time (created a minute ago, deadline 90s), "b" too
	// (deadline 10m), and the 2-minute-old lease-expired "b".
	db.Exec(t, `UPDATE ev SET published_at = now() WHERE published_at IS NULL AND dead_at IS NULL AND kind = 'a'`)
	ms = obScrape(t, c)
	if v := obValue(t, ms, "outbox_published_events_total", map[string]string{"kind": "a"}); v != 1 {
		t.Errorf("published a = %v, want 1", v)
	}
	// A late commit: published_at is stamped before the next scrape, the
	// transaction commits after it.
	ctx := context.Background()
	tx := db.Begin(t)
	if _, err := tx.Exec(ctx, `UPDATE ev SET published_at = clock_timestamp() - interval '2 seconds' WHERE kind = 'b' AND lease_until IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	ms = obScrape(t, c)
	if v := obValue(t, ms, "outbox_published_events_total", map[string]string{"kind": "b"}); v != 0 {
		t.Errorf("published b before the commit = %v, want 0", v)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `UPDATE ev SET published_at = now() WHERE published_at IS NULL AND dead_at IS NULL AND kind = 'b'`)
	for i := 0; i < 3; i++ {
		ms = obScrape(t, c)
		obCompare(t, ms, timestampStylePublished, "outbox_published_events_total", "outbox_published_late_events_total", "outbox_events")
	}
	if v := obValue(t, ms, "outbox_publish_latency_seconds", nil); v != 3 {
		t.Errorf("latency observations = %v, want 3", v)
	}
	// A row published after its deadline counts as late.
	db.Exec(t, `INSERT INTO ev (created_at, kind, published_at) VALUES (now() - interval '3 minutes', 'a', now())`)
	ms = obScrape(t, c)
	if v := obValue(t, ms, "outbox_published_late_events_total", map[string]string{"kind": "a"}); v != 1 {
		t.Errorf("late a = %v, want 1", v)
	}
	if v := obValue(t, ms, "outbox_oldest_pending_age_seconds", map[string]string{"kind": "a"}); v != 0 {
		t.Errorf("oldest a with nothing unpublished = %v, want 0", v)
	}
}

func TestOutboxDeleteOnPublish(t *testing.T) {
	db, pool, _ := obSetup(t, `CREATE TABLE q (id int PRIMARY KEY, created_at timestamptz NOT NULL, claimed_at timestamptz);
	  INSERT INTO q VALUES (1, now() - interval '1 minute', NULL), (2, now() - interval '7 minutes', now() - interval '10 seconds'),
	  (3, now() - interval '8 minutes', now() - interval '5 minutes')`)
	o := obDefaults(&config.Outbox{Table: "q", ClaimedAt: "claimed_at", LeaseTTL: time.Minute})
	c := NewCollector("q", o, pool, testutil.Quiet())
	ms := obScrape(t, c)
	obCompare(t, ms, `
# HELP outbox_events Unpublished and dead rows of the outbox by state (pending, in_flight, lease_expired, dead). A lower bound while outbox_events_capped is 1.
# TYPE outbox_events gauge
outbox_events{outbox="q",state="dead"} 0
outbox_events{outbox="q",state="in_flight"} 1
outbox_events{outbox="q",state="lease_expired"} 1
outbox_events{outbox="q",state="pending"} 1
# HELP outbox_past_deadline_events Unpublished rows older than their deadline. A lower bound while outbox_events_capped is 1.
# TYPE outbox_past_deadline_events gauge
outbox_past_deadline_events{outbox="q"} 2
`, "outbox_events", "outbox_past_deadline_events")
	obNear(t, "oldest", obValue(t, ms, "outbox_oldest_pending_age_seconds", nil), 480, 5)

	// Without a claim column every row is pending.
	c2 := NewCollector("q2", obDefaults(&config.Outbox{Table: "q"}), pool, testutil.Quiet())
	if v := obValue(t, obScrape(t, c2), "outbox_events", map[string]string{"state": "pending"}); v != 3 {
		t.Errorf("pending without a claim column = %v, want 3", v)
	}
	// An empty table: zeros, not absent series nor sentinels.
	db.Exec(t, `DELETE FROM q`)
	ms = obScrape(t, c)
	if v := obValue(t, ms, "outbox_oldest_pending_age_seconds", nil); v != 0 {
		t.Errorf("oldest of an empty outbox = %v, want 0", v)
	}
}

func TestOutboxFilterAndUnknownWhen(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema)
	db.Exec(t, `INSERT INTO outbox (event_type, status, attempts) VALUES ('keep', 'PENDING', 3), ('keep', 'PENDING', 1), ('skip', 'PENDING', 5)`)
	o := obStatusOutbox()
	o.Labels = o.Labels[:1]
	o.Filter = "event_type <> 'skip'"
	o.UnknownWhen = "attempts > 2"
	ms := obScrape(t, NewCollector("m", o, pool, testutil.Quiet()))
	obCompare(t, ms, `
# HELP outbox_unknown_result_events Unpublished rows whose publish result is unknown (status in unknown, lease expired after an attempt, or unknown_when): the broker may hold them, so a retry may duplicate them.
# TYPE outbox_unknown_result_events gauge
outbox_unknown_result_events{event_type="keep",outbox="m"} 1
# HELP outbox_retried_events Unpublished rows with attempts > 0. A lower bound while outbox_events_capped is 1.
# TYPE outbox_retried_events gauge
outbox_retried_events{event_type="keep",outbox="m"} 2
`, "outbox_unknown_result_events", "outbox_retried_events")
}

// seriesValue returns the value of series name{labels} in ms, -1 if absent.
func seriesValue(t *testing.T, c *Collector, name string, labels map[string]string) float64 {
	t.Helper()
	for k, v := range collect(t, c) {
		if k == seriesKey(name, labels) {
			return v
		}
	}
	return -1
}
