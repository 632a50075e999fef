package outbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-exporter/outbox_exporter/internal/testutil"

	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
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
# HELP outbox_events_capped 1 when a count of this outbox exceeded max_count at the last collection: the counts are then lower bounds per label set and state, never 0 where a row exists (claimed rows and unknown results exact up to max_count; pending and dead rows up to max_count divided among the label sets), and the oldest ages stay exact. It keeps a collection cheap during a huge backlog.
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

func TestOutboxLeaseExpiryCountedOnce(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema)
	// Leases that expired before the exporter started are history, not
	// counted; those expiring afterwards are, once per (row, lease).
	db.Exec(t, `INSERT INTO outbox (id, event_type, status, lease_until, attempts) VALUES
	  (1, 'x', 'CLAIMED', now() + interval '1 second', 1), (2, 'x', 'CLAIMED', now() + interval '1 hour', 1),
	  (3, 'x', 'CLAIMED', now() - interval '1 hour', 1)`)
	c := NewCollector("m", obStatusOutbox(), pool, testutil.Quiet())
	steps := []struct {
		sql   string
		sleep time.Duration
		want  float64
	}{
		{"", 0, 0},
		{"", 1200 * time.Millisecond, 1}, // row 1's lease expired
		{"", 0, 1},                       // still the same expired lease
		// A lease that expired a moment ago but became visible only now.
		{"UPDATE outbox SET lease_until = now() - interval '500 milliseconds' WHERE id = 2", 0, 2},
		{"UPDATE outbox SET lease_until = now() + interval '1 hour' WHERE id = 1", 0, 2},        // reclaimed: live again
		{"UPDATE outbox SET lease_until = now() - interval '1 millisecond' WHERE id = 1", 0, 3}, // its new lease expired
		{"UPDATE outbox SET status = 'PUBLISHED', published_at = now() WHERE id = 1", 0, 3},
		{"", 0, 3},
	}
	for i, s := range steps {
		if s.sql != "" {
			db.Exec(t, s.sql)
		}
		time.Sleep(s.sleep)
		if v := obValue(t, obScrape(t, c), "outbox_lease_expirations_total", nil); v != s.want {
			t.Errorf("step %d: lease expirations = %v, want %v", i, v, s.want)
		}
	}
}

func TestOutboxLabelCapAndDeadlines(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema)
	// Rows per type: a 4, b 3, c 2, d 1. a and c have deadline overrides,
	// so they always keep their series and their deadline (issue 14, item
	// 1: c used to fold into other and be judged against 300 s); the two
	// slots go to b and d, and nothing folds.
	db.Exec(t, `INSERT INTO outbox (created_at, event_type, topic)
	  SELECT now() - interval '2 minutes', t, 'x' FROM unnest(array['a','a','a','a','b','b','b','c','c','d']) t`)
	o := obStatusOutbox()
	o.Labels = o.Labels[:1]
	o.MaxLabelValues = 2
	o.Deadlines = map[string]time.Duration{"a": time.Minute, "c": time.Minute}
	c := NewCollector("m", o, pool, testutil.Quiet())
	obScrape(t, c)
	// A fifth type arrives: no slot is free, so it folds into other, with
	// the default deadline.
	db.Exec(t, `INSERT INTO outbox (created_at, event_type, topic) VALUES (now() - interval '10 minutes', 'e', 'x')`)
	ms := obScrape(t, c)
	obCompare(t, ms, `
# HELP outbox_past_deadline_events Unpublished rows older than their deadline. A lower bound while outbox_events_capped is 1.
# TYPE outbox_past_deadline_events gauge
outbox_past_deadline_events{event_type="a",outbox="m"} 4
outbox_past_deadline_events{event_type="b",outbox="m"} 0
outbox_past_deadline_events{event_type="c",outbox="m"} 2
outbox_past_deadline_events{event_type="d",outbox="m"} 0
outbox_past_deadline_events{event_type="other",outbox="m"} 1
# HELP outbox_deadline_seconds The configured notification deadline of these events in seconds.
# TYPE outbox_deadline_seconds gauge
outbox_deadline_seconds{event_type="a",outbox="m"} 60
outbox_deadline_seconds{event_type="b",outbox="m"} 300
outbox_deadline_seconds{event_type="c",outbox="m"} 60
outbox_deadline_seconds{event_type="d",outbox="m"} 300
outbox_deadline_seconds{event_type="other",outbox="m"} 300
`, "outbox_past_deadline_events", "outbox_deadline_seconds")
}

func TestOutboxCappedCountKeepsOldestExact(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema)
	db.Exec(t, `INSERT INTO outbox (created_at, event_type) SELECT now() - i * interval '1 second', CASE WHEN i % 2 = 0 THEN 'even' ELSE 'odd' END FROM generate_series(1, 40) i`)
	db.Exec(t, `CREATE INDEX ON outbox (event_type, created_at) WHERE status IN ('PENDING','CLAIMED','UNSURE')`)
	o := obStatusOutbox()
	o.MaxCount = 5
	for _, labels := range [][]config.Label{o.Labels[:1], nil} {
		o.Labels = labels
		ms := obScrape(t, NewCollector("m", o, pool, testutil.Quiet()))
		if v := obValue(t, ms, "outbox_events_capped", nil); v != 1 {
			t.Errorf("capped = %v, want 1", v)
		}
		var total float64
		for _, m := range ms {
			if strings.Contains(m.Desc().String(), `"outbox_events"`) {
				total += testutil.MetricValue(t, m)
			}
		}
		if total > 6 {
			t.Errorf("capped total %v, want at most max_count+1", total)
		}
		if labels != nil {
			obNear(t, "oldest even", obValue(t, ms, "outbox_oldest_pending_age_seconds", map[string]string{"event_type": "even"}), 40, 3)
			obNear(t, "oldest odd", obValue(t, ms, "outbox_oldest_pending_age_seconds", map[string]string{"event_type": "odd"}), 39, 3)
		} else {
			obNear(t, "oldest", obValue(t, ms, "outbox_oldest_pending_age_seconds", nil), 40, 3)
		}
	}
}

func TestOutboxOddIdentifiers(t *testing.T) {
	// Injection is refused by the config; a legit odd name is quoted.
	_, err := config.Parse([]byte(`
databases: {main: {dsn: "postgres://x@127.0.0.1/x"}}
outboxes:
  m:
    database: main
    table: public.outbox
    id: id
    created_at: "created_at; DROP TABLE outbox"
    deadline: 5m
`), func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), "outboxes.m.created_at") {
		t.Fatalf("config with an injected column = %v, want an error naming outboxes.m.created_at", err)
	}
	_, pool, _ := obSetup(t, `CREATE TABLE "Outbox" ("select" text NOT NULL, "from" timestamptz NOT NULL, "Order" text, id int);
	  INSERT INTO "Outbox" VALUES ('it''s', now() - interval '1 minute', 'o''1', 1), ('DONE', now(), 'x', 2)`)
	o := obDefaults(&config.Outbox{Table: "public.Outbox", CreatedAt: "from", Status: "select",
		Pending: []string{"it's"}, Published: []string{"DONE"}, Labels: []config.Label{{Name: "order", Column: "Order"}}})
	ms := obScrape(t, NewCollector("odd", o, pool, testutil.Quiet()))
	if v := obValue(t, ms, "outbox_events", map[string]string{"state": "pending", "order": "o'1"}); v != 1 {
		t.Errorf("pending = %v, want 1", v)
	}
}

func TestOutboxFilterCannotWrite(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema+`CREATE SEQUENCE s; INSERT INTO outbox (event_type) VALUES ('x');`)
	o := obStatusOutbox()
	o.Filter = "nextval('s') > 0"
	_, err := obTryScrape(NewCollector("m", o, pool, testutil.Quiet()), 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("scrape with a writing filter = %v, want a read-only error", err)
	}
	var n int64
	if err := db.Admin.QueryRow(context.Background(), `SELECT last_value FROM s`).Scan(&n); err != nil || n != 1 {
		t.Errorf("sequence moved: %v %v", n, err)
	}
}

func obSuccess(t *testing.T, ms []prometheus.Metric) float64 {
	t.Helper()
	return obValue(t, ms, "outbox_exporter_collector_success", map[string]string{"collector": "outbox"})
}

func TestOutboxLockedTableBoundedByDeadline(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema+`INSERT INTO outbox (event_type) VALUES ('x');`)
	c := NewCollector("m", obStatusOutbox(), pool, testutil.Quiet())
	e := collectors.NewExporter(testutil.Quiet(), c)
	ctx := context.Background()
	tx := db.Begin(t)
	if _, err := tx.Exec(ctx, `LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	var ms []prometheus.Metric
	testutil.Bounded(t, "a scrape of a locked table", time.Second, func() { ms = e.Collect(sctx) })
	cancel()
	if v := obSuccess(t, ms); v != 0 {
		t.Errorf("success while locked = %v, want 0", v)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	sctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ms = e.Collect(sctx)
	if v := obSuccess(t, ms); v != 1 {
		t.Errorf("success after the lock = %v, want 1", v)
	}
	if v := obValue(t, ms, "outbox_events", map[string]string{"state": "pending"}); v != 1 {
		t.Errorf("pending after the lock = %v, want 1", v)
	}
}

func TestOutboxDatabaseRefusesConnectionsAndComesBack(t *testing.T) {
	db, pool, _ := obSetup(t, obStatusSchema+`INSERT INTO outbox (event_type) VALUES ('x');`)
	e := collectors.NewExporter(testutil.Quiet(), NewCollector("m", obStatusOutbox(), pool, testutil.Quiet()))
	scrape := func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return obSuccess(t, e.Collect(ctx))
	}
	if v := scrape(); v != 1 {
		t.Fatalf("first scrape success = %v", v)
	}
	ctx := context.Background()
	server, err := pgx.Connect(ctx, pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close(ctx)
	name := pgx.Identifier{db.Name}.Sanitize()
	if _, err := server.Exec(ctx, "ALTER DATABASE "+name+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = server.Exec(context.Background(), "ALTER DATABASE "+name+" ALLOW_CONNECTIONS true") })
	if _, err := server.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`,
		db.Name, pg.ApplicationName); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if v := scrape(); v != 0 {
			t.Errorf("scrape %d while the database refuses connections: success %v, want 0", i, v)
		}
	}
	if _, err := server.Exec(ctx, "ALTER DATABASE "+name+" ALLOW_CONNECTIONS true"); err != nil {
		t.Fatal(err)
	}
	// The pool reconnects by itself; allow it a few scrapes to drop the
	// sessions the server killed.
	ok := false
	for i := 0; i < 5 && !ok; i++ {
		ok = scrape() == 1
	}
	if !ok {
		t.Error("no successful scrape after the database allowed connections again")
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
