package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/alerts"
	"github.com/outbox-exporter/outbox_exporter/demo"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

func TestShortFor(t *testing.T) {
	for _, c := range []struct {
		in, want time.Duration
	}{
		{0, 0},
		{time.Minute, MinFor},
		{2 * time.Minute, MinFor},
		{5 * time.Minute, MinFor},
		{10 * time.Minute, 10 * time.Second},
		{15 * time.Minute, 15 * time.Second},
		{time.Hour, time.Minute},
	} {
		if got := ShortFor(c.in); got != c.want {
			t.Errorf("ShortFor(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

// TestScrapeAlertsExist: every alert the test gives StartupFor is one the
// rules have, so a renamed alert cannot silently lose its margin.
func TestScrapeAlertsExist(t *testing.T) {
	t.Setenv("OUTBOX_DSN", "postgres://x@127.0.0.1/app")
	t.Setenv("SEARCH_DSN", "postgres://x@127.0.0.1/search")
	cfg, err := config.Load("../deploy/example.yml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := alerts.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			have[r.Alert] = true
		}
	}
	for name := range ScrapeAlerts {
		if !have[name] {
			t.Errorf("ScrapeAlerts names %s, which the rules lack", name)
		}
	}
	if StartupFor <= ScrapeWait {
		t.Errorf("StartupFor %s does not outlast ScrapeWait %s", StartupFor, ScrapeWait)
	}
}

func TestShortenRules(t *testing.T) {
	in := alerts.File{Groups: []alerts.Group{{Name: "g", Rules: []alerts.Rule{
		{Record: "r", Expr: "sum(rate(x[30d]))"},
		{Alert: "A", Expr: "rate(y[10m]) > 0", For: "15m"},
		{Alert: "B", Expr: "z > 0"},
		{Alert: "C", Expr: "z > 1", For: "1h30m"},
		{Alert: "OutboxExporterAbsent", Expr: "absent(up)", For: "5m"},
	}}}}
	out, err := ShortenRules(in)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, r := range out.Groups[0].Rules {
		got = append(got, r.Record+r.Alert+":"+r.For+":"+r.Expr)
	}
	want := []string{"r::sum(rate(x[30d]))", "A:15s:rate(y[10m]) > 0", "B::z > 0", "C:1m30s:z > 1", "OutboxExporterAbsent:2m:absent(up)"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if in.Groups[0].Rules[1].For != "15m" {
		t.Errorf("the input was changed: %q", in.Groups[0].Rules[1].For)
	}
	if _, err := ShortenRules(alerts.File{Groups: []alerts.Group{{Name: "g", Rules: []alerts.Rule{{Alert: "A", For: "soon"}}}}}); err == nil {
		t.Error("a bad for: was accepted")
	}
}

const sampleDashboard = `{
  "panels": [
    {"type": "timeseries", "title": "Top", "targets": [{"refId": "A", "expr": "max(up{job=~\"$job\"})"}]},
    {"type": "row", "title": "Row", "panels": [
      {"type": "timeseries", "title": "Inner", "targets": [
        {"refId": "A", "expr": "rate(x{instance=~\"${instance}\"}[$__rate_interval])"},
        {"refId": "B", "expr": ""}
      ]}
    ]}
  ],
  "templating": {"list": [
    {"name": "datasource", "type": "datasource", "query": "prometheus"},
    {"name": "job", "type": "query", "query": "label_values(outbox_exporter_build_info, job)", "includeAll": true, "allValue": ".+"},
    {"name": "instance", "type": "query", "query": {"query": "label_values(up{job=~\"$job\"}, instance)", "refId": "V"}, "includeAll": true, "allValue": ".+"},
    {"name": "topic", "type": "custom", "query": "a,b", "includeAll": true,
     "options": [{"value": "$__all"}, {"value": "b.x"}, {"value": "a"}]}
  ]}
}`

func TestParseDashboardAndSubstitute(t *testing.T) {
	d, err := ParseDashboard("d.json", []byte(sampleDashboard))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Targets) != 2 || d.Targets[0].Panel != "Top" || d.Targets[1].Panel != "Inner" {
		t.Fatalf("targets %+v", d.Targets)
	}
	values, err := Values(d.Variables, Builtins("2s"))
	if err != nil {
		t.Fatal(err)
	}
	if values["topic"] != `(a|b\.x)` || values["job"] != ".+" || d.Variables[2].Query != `label_values(up{job=~"$job"}, instance)` {
		t.Errorf("values %v, variables %+v", values, d.Variables)
	}
	for _, c := range []struct {
		in, want string
	}{
		{d.Targets[0].Expr, `max(up{job=~".+"})`},
		{d.Targets[1].Expr, `rate(x{instance=~".+"}[1m])`},
		{`sum_over_time(x[$__interval]) + y[[job]] + z${topic:regex}`, `sum_over_time(x[2s]) + y.+ + z(a|b\.x)`},
	} {
		got, err := Substitute(c.in, values)
		if err != nil || got != c.want {
			t.Errorf("Substitute(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := Substitute(`x{a=~"$nope"}`, values); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("an unknown variable: %v", err)
	}
	if _, err := Values([]Variable{{Name: "v", Type: "query", Query: "label_values(x)"}}, nil); err == nil {
		t.Error("a query variable without an All value or options was accepted")
	}
	if _, err := Values([]Variable{{Name: "v", Type: "adhoc"}}, nil); err == nil {
		t.Error("an unhandled variable type was accepted")
	}
}

func TestParseLabelValues(t *testing.T) {
	for _, c := range []struct {
		in, sel, label string
		bad            bool
	}{
		{in: `label_values(job)`, label: "job"},
		{in: `label_values(outbox_exporter_build_info{job="a,b", x=~".+"}, instance)`, sel: `outbox_exporter_build_info{job="a,b", x=~".+"}`, label: "instance"},
		{in: ` label_values(up{job="q\"uote,"} , job) `, sel: `up{job="q\"uote,"}`, label: "job"},
		{in: `query_result(up)`, bad: true},
		{in: `label_values(up, 1bad)`, bad: true},
	} {
		sel, label, err := ParseLabelValues(c.in)
		if (err != nil) != c.bad || sel != c.sel || label != c.label {
			t.Errorf("ParseLabelValues(%q) = %q, %q, %v", c.in, sel, label, err)
		}
	}
}

func TestExpectationsCoverEveryFault(t *testing.T) {
	own := map[AlertKey]demo.FaultKind{}
	var kinds []demo.FaultKind
	for _, e := range Expectations {
		kinds = append(kinds, e.Fault)
		if len(e.Own) == 0 {
			t.Errorf("%s has no alert of its own", e.Fault)
		}
		for _, k := range e.Own {
			if other, ok := own[k]; ok {
				t.Errorf("%s is the own alert of both %s and %s", k, other, e.Fault)
			}
			own[k] = e.Fault
		}
	}
	for _, e := range Expectations {
		for _, k := range append(append([]AlertKey(nil), e.Shared...), e.May...) {
			if f, ok := own[k]; ok {
				t.Errorf("%s: %s is %s's own alert", e.Fault, k, f)
			}
		}
	}
	slices.Sort(kinds)
	all := slices.Clone(demo.FaultKinds)
	slices.Sort(all)
	if !slices.Equal(kinds, all) {
		t.Errorf("expectations for %v, the demo injects %v", kinds, all)
	}
}

func TestMissingAndUnexpected(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	injected := map[demo.FaultKind]time.Time{}
	received := map[AlertKey]time.Time{}
	for _, e := range Expectations {
		injected[e.Fault] = t0
		for _, k := range append(append([]AlertKey(nil), e.Own...), e.Shared...) {
			received[k] = t0.Add(30 * time.Second)
		}
	}
	if m := Missing(injected, received, time.Minute); len(m) != 0 {
		t.Errorf("all in: %v", m)
	}
	lease := AlertKey{Name: "OutboxLeaseExpiriesSustained"}
	silent := AlertKey{Name: "OutboxAuditSilentLoss"}
	stall := AlertKey{Name: "OutboxConsumerLagAboveDeadline"}
	delete(received, lease)
	received[silent] = t0.Add(-time.Second)
	received[stall] = t0.Add(2 * time.Minute)
	delete(injected, demo.FaultMissingOutbox)
	m := strings.Join(Missing(injected, received, time.Minute), "\n")
	for _, want := range []string{
		"relay_crash (injected 10:00:00) did not raise OutboxLeaseExpiriesSustained",
		"mark_before_send (injected 10:00:00) did not raise OutboxAuditSilentLoss (it arrived at 09:59:59, before the fault)",
		"consumer_stall (injected 10:00:00) did not raise OutboxConsumerLagAboveDeadline within 1m0s (it took 2m0s)",
		"missing_outbox: not injected",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("Missing lacks %q:\n%s", want, m)
		}
	}
	received[AlertKey{Name: "OutboxReconcileGaps", Kind: "stale_target"}] = t0
	received[AlertKey{Name: "OutboxPublishDeadlineBudgetBurn"}] = t0
	received[AlertKey{Name: "OutboxExporterAbsent"}] = t0
	received[AlertKey{Name: "OutboxReconcileGaps", Kind: "missing_outbox"}] = t0
	if got := Unexpected(received); !slices.Equal(got, []string{"OutboxExporterAbsent", `OutboxReconcileGaps{kind="missing_outbox"}`}) {
		t.Errorf("Unexpected = %v", got)
	}
}

const samplePage = `<!doctype html><html><body>
<nav><a href="/metrics">Metrics</a><a href="https://example.com/runbook.md">Runbook</a></nav>
<table>
<tr class="outbox" data-outbox="messages" data-status="crit"><td>messages<a href="/api/v1/stuck?outbox=messages&amp;limit=20">stuck</a></td><td><svg class="trend" aria-label="trend of the last hour against the deadline"><polyline points="1,2"/></svg></td></tr>
<tr><td colspan="8"><table class="stuck"><tr><th>id</th></tr><tr><td><code>e1</code></td></tr></table></td></tr>
</table>
<table>
<tr class="group" data-group="notify" data-status="ok"><td><svg class="trend" aria-label="no history yet"><text>no history yet</text></svg></td></tr>
<tr class="group" data-group="search-index" data-status="purple"><td></td></tr>
</table>
<table><tr class="reconcile" data-job="search_index" data-status="warn"><td></td></tr></table>
</body></html>`

func TestCheckPage(t *testing.T) {
	rep := CheckPage([]byte(samplePage), PageWant{
		Outboxes:   []string{"messages"},
		Groups:     []string{"notify", "search-index"},
		Reconciles: []string{"search_index"},
		Audits:     []string{"messages"},
		Stuck:      true,
	})
	want := []string{
		`group "search-index": data-status "purple" is not one of [ok warn crit unknown]`,
		`group "search-index": no trend SVG`,
		`reconcile "search_index": no link to /api/v1/reconcile?job=search_index`,
		`audit "messages": no link to /api/v1/audit?outbox=messages`,
		`no audit row for "messages"`,
	}
	if !slices.Equal(rep.Problems, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(rep.Problems, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(rep.Summary, "outbox messages=crit") {
		t.Errorf("summary %q", rep.Summary)
	}
	if !slices.Equal(rep.Links, []string{"/metrics", "https://example.com/runbook.md", "/api/v1/stuck?outbox=messages&limit=20"}) {
		t.Errorf("links %q", rep.Links)
	}
	calm := strings.ReplaceAll(strings.ReplaceAll(samplePage, `"crit"`, `"ok"`), `aria-label="trend of the last hour against the deadline"`, `aria-label="no history yet"`)
	calm = strings.ReplaceAll(strings.ReplaceAll(calm, "<code>e1</code>", ""), "Runbook", "Docs")
	rep = CheckPage([]byte(calm), PageWant{Outboxes: []string{"messages"}, Stuck: true})
	if !slices.Equal(rep.Problems, []string{"no link to the runbook", "no stuck rows listed although faults are active",
		"no row is crit although faults are active", "no trend SVG draws any history"}) {
		t.Errorf("calm page: %q", rep.Problems)
	}
}
