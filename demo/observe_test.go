package demo

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-exporter/outbox_exporter/app"
	"github.com/outbox-exporter/outbox_exporter/collectors/outbox"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/reconcile"
)

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// sample is one metric value with its labels.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

func scrape(t *testing.T, a *app.App) []sample {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []sample
	for _, m := range a.Exporter.Collect(ctx) {
		name := fqName.FindStringSubmatch(m.Desc().String())
		var d dto.Metric
		if len(name) < 2 || m.Write(&d) != nil {
			continue
		}
		s := sample{name: name[1], labels: map[string]string{}}
		for _, l := range d.GetLabel() {
			s.labels[l.GetName()] = l.GetValue()
		}
		switch {
		case d.Gauge != nil:
			s.value = d.GetGauge().GetValue()
		case d.Counter != nil:
			s.value = d.GetCounter().GetValue()
		default:
			continue
		}
		out = append(out, s)
	}
	return out
}

// value sums the samples of name whose labels include want.
func value(ss []sample, name string, want map[string]string) (float64, bool) {
	var sum float64
	found := false
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		sum += s.value
		found = true
	}
	return sum, found
}

// waitMetric scrapes until name{want} satisfies ok.
func waitMetric(t *testing.T, a *app.App, d time.Duration, name string, want map[string]string, ok func(float64) bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last float64
	var found bool
	for time.Now().Before(deadline) {
		last, found = value(scrape(t, a), name, want)
		if found && ok(last) {
			t.Logf("seen %s%v = %v", name, want, last)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Errorf("%s%v did not move within %s: last %v (found %v)", name, want, d, last, found)
}

func gt(x float64) func(float64) bool { return func(v float64) bool { return v > x } }

// TestExporterSeesEachFault runs the exporter's own collectors, audit and
// reconcile job on the config the demo writes, and checks that each
// injected fault moves the metric the announcement names.
func TestExporterSeesEachFault(t *testing.T) {
	o := testOptions()
	o.Rate = 4
	o.OutboxDeadline = 4 * time.Second
	o.LeaseTTL = 2 * time.Second
	o.ReclaimAfter = 8 * time.Second
	o.UnknownBackoff = 30 * time.Second
	o.AuditGrace = 2 * time.Second
	o.NotifyDeadline = 3 * time.Second
	o.StallFor = 12 * time.Second
	o.ReconcileGrace = 2 * time.Second
	p, _ := start(t, o)
	a, gaps := observe(t, p)

	// Healthy first seconds: nothing past its deadline, no gaps.
	time.Sleep(6 * time.Second)
	checkHealthyMetrics(t, a, gaps)

	inject(t, p, FaultRelayCrash)
	waitMetric(t, a, 15*time.Second, "outbox_events", map[string]string{"state": "lease_expired"}, gt(0))
	waitMetric(t, a, 15*time.Second, "outbox_past_deadline_events", nil, gt(0))
	waitMetric(t, a, 15*time.Second, "outbox_lease_expirations_total", nil, gt(0))

	inject(t, p, FaultAckLost)
	waitMetric(t, a, 10*time.Second, "outbox_unknown_result_events", nil, gt(0))
	waitMetric(t, a, 30*time.Second, "outbox_audit_unmarked_in_broker_events", nil, gt(0))
	waitMetric(t, a, 40*time.Second, "outbox_audit_duplicates_total", nil, gt(0))

	inject(t, p, FaultMarkBeforeSend)
	waitMetric(t, a, 20*time.Second, "outbox_audit_missing_in_broker_events", nil, gt(0))

	inject(t, p, FaultConsumerStall)
	waitMetric(t, a, 12*time.Second, "outbox_consumer_lag_seconds", map[string]string{"group": GroupNotify}, gt(o.NotifyDeadline.Seconds()))

	seeReconcileGaps(t, p, gaps)
	seeOrderFaults(t, p, a)
	if t.Failed() {
		var b strings.Builder
		for _, s := range scrape(t, a) {
			if strings.HasPrefix(s.name, "outbox_") {
				fmt.Fprintf(&b, "%s%v %v\n", s.name, s.labels, s.value)
			}
		}
		t.Logf("last scrape:\n%s", b.String())
	}
}

// observe builds and starts the exporter's app on the config the demo
// writes (audits comparing every 2s) and a reconcile scheduler, both
// stopped when the test ends; gaps runs the search_index job once.
func observe(t *testing.T, p *Pipeline) (a *app.App, gaps func() map[reconcile.Kind]int64) {
	t.Helper()
	cfg, err := config.Parse(p.ConfigYAML(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a, err = app.Build(ctx, cfg, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	// The demo's tables carry every column and index the exporter's
	// queries want.
	for name, ob := range cfg.Outboxes {
		r, err := outbox.Check(ctx, a.Pools[ob.Database], name, ob)
		if err != nil || !r.OK {
			t.Errorf("exporter check of outbox %s: %v\n%s", name, err, r.Text())
		}
	}
	for _, au := range a.Audits {
		au.SetCompareInterval(2 * time.Second)
	}
	a.Start(ctx)
	sched, err := reconcile.New(cfg, a.Pools, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sched.Stop)
	return a, func() map[reconcile.Kind]int64 {
		t.Helper()
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		defer rcancel()
		r, err := sched.Run(rctx, "search_index", false)
		if err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		return r.Gaps
	}
}

// checkHealthyMetrics checks, once the audit has checked events, that no
// fault metric is above 0, every collector succeeds and reconcile finds
// no gap.
func checkHealthyMetrics(t *testing.T, a *app.App, gaps func() map[reconcile.Kind]int64) {
	t.Helper()
	waitMetric(t, a, 20*time.Second, "outbox_audit_checked_events_total", nil, gt(0))
	ss := scrape(t, a)
	for _, c := range []struct {
		name string
		want map[string]string
	}{
		{"outbox_past_deadline_events", nil},
		{"outbox_unknown_result_events", nil},
		{"outbox_audit_missing_in_broker_events", nil},
		{"outbox_audit_duplicates_total", nil},
		// Many messages, edited, over two relays that keep per-message
		// order: no inversion, no receipt-less publish.
		{"outbox_out_of_order_events", nil},
		{"outbox_audit_order_inversions_total", nil},
		{"outbox_published_without_receipt_events_total", nil},
	} {
		if v, found := value(ss, c.name, c.want); !found || v != 0 {
			t.Errorf("healthy: %s = %v (found %v), want 0", c.name, v, found)
		}
	}
	for _, s := range ss {
		if s.name == "outbox_exporter_collector_success" && s.value != 1 {
			t.Errorf("collector %v failed", s.labels)
		}
	}
	if g := gaps(); g["missing_outbox"]+g["missing_target"]+g["orphan_target"]+g["stale_target"] != 0 {
		t.Errorf("healthy: reconcile gaps %v", g)
	}
}

// seeReconcileGaps injects each fault reconcile finds and waits for its
// gap count to grow.
func seeReconcileGaps(t *testing.T, p *Pipeline, gaps func() map[reconcile.Kind]int64) {
	t.Helper()
	for _, c := range []struct {
		kind FaultKind
		gap  reconcile.Kind
	}{
		{FaultIndexRowLost, "missing_target"},
		{FaultMissingOutbox, "missing_outbox"},
		{FaultRollbackAfterPublish, "orphan_target"},
	} {
		before := gaps()[c.gap]
		inject(t, p, c.kind)
		deadline := time.Now().Add(20 * time.Second)
		for {
			time.Sleep(time.Second)
			g := gaps()
			if g[c.gap] > before {
				t.Logf("%s: reconcile %s %d -> %d", c.kind, c.gap, before, g[c.gap])
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: reconcile %s stayed %d: %v", c.kind, c.gap, g[c.gap], g)
				break
			}
		}
	}
}

// seeOrderFaults injects the order and receipt faults and waits for their
// metrics: the overtaken event while its relay stalls, in the stuck rows
// with the version that overtook it; the inversion the audit sees once it
// is published; the receipt-less publish.
func seeOrderFaults(t *testing.T, p *Pipeline, a *app.App) {
	t.Helper()
	ov := inject(t, p, FaultOrderOvertaken)
	waitMetric(t, a, 15*time.Second, "outbox_out_of_order_events", nil, gt(0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := a.Stuck(ctx, "messages", 5)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rows {
		if r.ID == ov.EventIDs[0] && r.Order != nil {
			found = true
			seq, _ := strconv.Atoi(r.Order.Sequence)
			over, _ := strconv.Atoi(r.Order.OvertakenBy)
			if r.Order.Aggregate != fmt.Sprint(ov.MessageIDs[0]) || seq < 1 || over <= seq {
				t.Errorf("overtaken row %+v", r.Order)
			}
		}
	}
	if !found {
		t.Errorf("stuck rows do not show %s out of order: %+v", ov.EventIDs[0], rows)
	}
	waitMetric(t, a, 30*time.Second, "outbox_audit_order_inversions_total", nil, gt(0))
	waitMetric(t, a, 15*time.Second, "outbox_out_of_order_events", nil, func(v float64) bool { return v == 0 })

	before, _ := value(scrape(t, a), "outbox_published_without_receipt_events_total", nil)
	inject(t, p, FaultMarkedByHand)
	waitMetric(t, a, 15*time.Second, "outbox_published_without_receipt_events_total", nil, gt(before))
}
