package web

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

var update = flag.Bool("update", false, "rewrite testdata/metrics.golden")

const goldenSchema = `
CREATE TABLE messages (id bigint PRIMARY KEY, version int NOT NULL, created_at timestamptz NOT NULL);
CREATE TABLE search_index (message_id bigint PRIMARY KEY, version int NOT NULL);
CREATE TABLE outbox (
	event_id text PRIMARY KEY, message_id bigint NOT NULL, message_version int NOT NULL,
	event_type text NOT NULL, topic text NOT NULL, status text NOT NULL,
	created_at timestamptz NOT NULL, published_at timestamptz, lease_until timestamptz,
	attempts int NOT NULL DEFAULT 0, last_error text,
	conversation_id text NOT NULL DEFAULT 'c1', seq int8 NOT NULL DEFAULT 1, receipt_id text);
INSERT INTO messages SELECT g, 1, now() - interval '1 hour' FROM generate_series(1, 6) g;
INSERT INTO search_index SELECT g, 1 FROM generate_series(1, 4) g;
INSERT INTO outbox VALUES
 ('e1', 1, 1, 'order.paid',   'messages', 'PUBLISHED', now() - interval '50 min', now() - interval '49 min', NULL, 1, NULL),
 ('e2', 2, 1, 'order.paid',   'messages', 'PENDING',   now() - interval '10 min', NULL, NULL, 0, NULL),
 ('e3', 3, 1, 'message.sent', 'messages', 'CLAIMED',   now() - interval '2 min', NULL, now() - interval '1 min', 1, 'timeout'),
 ('e4', 4, 1, 'message.sent', 'messages', 'CLAIMED',   now() - interval '5 s', NULL, now() + interval '1 min', 1, NULL),
 ('e5', 5, 1, 'message.sent', 'messages', 'ABANDONED', now() - interval '30 min', NULL, NULL, 5, 'bad payload');
`

// TestMetricsGolden scrapes an exporter running every collector on a known
// pipeline and compares the series it exports, values aside, with
// testdata/metrics.golden. The generated dashboards and rules are checked
// against the same file, so they can name only what the exporter exports.
// promtool lints the raw exposition.
func TestMetricsGolden(t *testing.T) {
	db := pgtest.New(t)
	db.Exec(t, goldenSchema)
	kc := kafkatest.New(t, 1, kfake.SeedTopics(2, "messages"))
	seedGoldenTopic(t, kc.Brokers())
	s := startOn(t, goldenConfig(db.URL, kc.Brokers()[0]))
	h := s.Handler()
	scrapeWith(h, "") // starts the published watermark
	db.Exec(t, "UPDATE outbox SET status = 'PUBLISHED', published_at = now() WHERE event_id = 'e2'")
	// The audit's gauges appear after its first comparison; run it now
	// instead of waiting for its interval.
	au := s.App().Audits["messages"]
	for deadline := time.Now().Add(20 * time.Second); !au.Ready() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if err := au.Compare(context.Background()); err != nil {
		t.Fatalf("audit compare: %v", err)
	}
	var body string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		body, _ = scrapeWith(h, "")
		if strings.Contains(body, "outbox_reconcile_rows_checked{") && strings.Contains(body, "outbox_published_events_total{") &&
			strings.Contains(body, "outbox_share_group_lag_seconds{") {
			break
		}
	}
	for _, c := range []string{"outbox", "kafka", "reconcile", "audit", "database"} {
		if !regexp.MustCompile(`outbox_exporter_collector_success\{collector="` + c + `",target="[^"]+"\} 1`).MatchString(body) {
			t.Fatalf("collector %s did not succeed:\n%s", c, grep(body, "collector_success"))
		}
	}
	lintExposition(t, body)
	compareGolden(t, body)
}

// seedGoldenTopic produces event e1 twice (a duplicate) to messages and
// commits the first record for the group search-index, whose member stays
// in the group (state Stable) until the test ends.
func seedGoldenTopic(t *testing.T, brokers []string) {
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, id := range []string{"e1", "e1"} { // a duplicate
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "messages", Value: []byte("{}"), Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(id)}}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	group, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("search-index"), kgo.ConsumeTopics("messages"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(group.Close)
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	fs := group.PollRecords(fctx, 1)
	cancel()
	if err := group.CommitRecords(ctx, fs.Records()...); err != nil {
		t.Fatal(err)
	}
	seedShareGroup(t, brokers)
}

// seedShareGroup starts share group jobs on messages from the earliest
// offset; its member accepts one record and stays until the test ends.
func seedShareGroup(t *testing.T, brokers []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, "jobs"
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value = "share.auto.offset.reset", kmsg.StringPtr("earliest")
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	if _, err := req.RequestWith(ctx, adm); err != nil {
		t.Fatalf("share group config: %v", err)
	}
	sc, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ShareGroup("jobs"), kgo.ConsumeTopics("messages"),
		kgo.ShareMaxRecords(1), kgo.ShareMaxRecordsStrict())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sc.Close)
	fs := sc.PollRecords(ctx, 1)
	if len(fs.Records()) == 0 {
		t.Fatalf("share group jobs read nothing: %v", fs.Err0())
	}
	sc.MarkAcks(kgo.AckAccept, fs.Records()...)
	if err := sc.FlushAcks(ctx); err != nil {
		t.Fatalf("share group acks: %v", err)
	}
}

// goldenConfig runs every collector: the reliability outbox with dead
// states and order columns, a Kafka group, a reconcile job and an audit,
// led by this one replica (leader_election).
func goldenConfig(dbURL, broker string) string {
	cfg := reliabilityConfig(dbURL, 2)
	return strings.Replace(cfg, "    labels: {event_type: event_type}", "    labels: {event_type: event_type}\n    dead: [ABANDONED]\n    aggregate: conversation_id\n    sequence: seq\n    receipt: receipt_id", 1) + fmt.Sprintf(`
kafka:
  main:
    brokers: [%s]
    groups: [search-index]
    share_groups: [jobs]
    deadline: 2m
reconcile:
  search_index:
    schedule: "@every 1s"
    grace: 1s
    authority: {database: main, table: messages, key: id, version: version, created_at: created_at}
    outbox: {name: messages, key: message_id, version: message_version}
    target: {database: main, table: search_index, key: message_id, version: version}
audit:
  messages:
    kafka: main
    topics: [messages]
    event_id: header:event_id
    grace: 1s
    aggregate: key
    sequence: header:seq
leader_election:
  database: main
  check_interval: 1s
  retry_interval: 100ms
`, broker)
}

// lintExposition runs promtool check metrics on body and checks that
// every metric whose name is fixed (fixedMetrics) is in it.
func lintExposition(t *testing.T, body string) {
	t.Helper()
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Fatalf("promtool is missing (apt-get install -y --no-install-recommends prometheus): %v", err)
	}
	lint := exec.Command("promtool", "check", "metrics")
	lint.Stdin = strings.NewReader(body)
	if out, err := lint.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	for _, name := range fixedMetrics {
		if !strings.Contains(body, "\n"+name+"{") && !strings.Contains(body, "\n"+name+" ") && !strings.Contains(body, "\n"+name+"_bucket{") {
			t.Errorf("%s is not exported", name)
		}
	}
}

// compareGolden compares body's series, values aside, with
// testdata/metrics.golden (rewritten first with -update).
func compareGolden(t *testing.T, body string) {
	t.Helper()
	got := normalize(body)
	const golden = "testdata/metrics.golden"
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("exported series differ from %s (rerun with -update if intended):\n%s", golden, diffLines(string(want), got))
	}
}

// fixedMetrics are the metric names users' rules and dashboards rely on:
// they never change.
var fixedMetrics = []string{
	"outbox_events", "outbox_oldest_pending_age_seconds", "outbox_deadline_seconds", "outbox_past_deadline_events",
	"outbox_retried_events", "outbox_unknown_result_events", "outbox_lease_expirations_total",
	"outbox_published_events_total", "outbox_published_late_events_total", "outbox_publish_latency_seconds",
	"outbox_consumer_lag_messages", "outbox_consumer_lag_seconds", "outbox_consumer_deadline_seconds",
	"outbox_consumer_group_members", "outbox_reconcile_gaps", "outbox_reconcile_rows_checked",
	"outbox_reconcile_last_success_timestamp_seconds", "outbox_reconcile_duration_seconds",
	"outbox_audit_missing_in_broker_events", "outbox_audit_unmarked_in_broker_events", "outbox_audit_duplicates_total",
	"outbox_audit_checked_events_total", "outbox_exporter_collector_success", "outbox_exporter_collector_duration_seconds",
	"outbox_exporter_build_info", "outbox_exporter_config_last_reload_successful",
	"outbox_out_of_order_events", "outbox_audit_order_inversions_total", "outbox_published_without_receipt_events_total",
	"outbox_database_in_recovery", "outbox_database_replay_lag_seconds",
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? \S+$`)

// normalize keeps the HELP and TYPE lines and each series' identity of the
// outbox_ metrics, dropping values (ages and durations change every run)
// and the values of labels that are not stable (build information).
func normalize(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		switch {
		case strings.HasPrefix(l, "# HELP outbox_"), strings.HasPrefix(l, "# TYPE outbox_"):
			out = append(out, l)
		case strings.HasPrefix(l, "outbox_"):
			m := sampleLine.FindStringSubmatch(l)
			if m == nil {
				out = append(out, l)
				continue
			}
			series := m[1] + m[2]
			if m[1] == "outbox_exporter_build_info" {
				series = m[1] + "{...}"
			}
			out = append(out, series)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return key(out[i]) < key(out[j]) })
	return strings.Join(out, "\n") + "\n"
}

// key orders lines by family, HELP then TYPE then series.
func key(l string) string {
	switch {
	case strings.HasPrefix(l, "# HELP "):
		return strings.Fields(l)[2] + " 0"
	case strings.HasPrefix(l, "# TYPE "):
		return strings.Fields(l)[2] + " 1"
	}
	name := l
	if i := strings.IndexAny(l, "{ "); i >= 0 {
		name = l[:i]
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if strings.HasPrefix(name, "outbox_publish_latency_seconds") {
			name = strings.TrimSuffix(name, suf)
		}
	}
	return name + " 2" + l
}

func diffLines(want, got string) string {
	w, g := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(want, "\n") {
		w[l] = true
	}
	for _, l := range strings.Split(got, "\n") {
		g[l] = true
	}
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
