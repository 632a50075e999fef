package alerts

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// requireTool finds a binary the checks run, failing (not skipping) with
// how to install it when it is missing.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed; install it with: apt-get install -y --no-install-recommends prometheus prometheus-alertmanager", name)
	}
	return p
}

func TestPromtoolCheckRules(t *testing.T) {
	promtool := requireTool(t, "promtool")
	out, err := exec.Command(promtool, "check", "rules", "testdata/example.rules.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

func TestPromtoolTestRules(t *testing.T) {
	promtool := requireTool(t, "promtool")
	out, err := exec.Command(promtool, "test", "rules", "testdata/example.rules.test.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// unitTests is the part of a promtool test file the coverage check reads.
type unitTests struct {
	Tests []struct {
		Name           string `yaml:"name"`
		AlertRuleTests []struct {
			EvalTime  string           `yaml:"eval_time"`
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestEveryAlertIsTestedAroundItsFor checks that the promtool tests cover
// every generated alerting rule: for each rule, a test group where it does
// not fire one evaluation (1m) before its `for:` has elapsed and fires at
// the next; and a healthy group where nothing fires.
func TestEveryAlertIsTestedAroundItsFor(t *testing.T) {
	f, err := Build(exampleConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("testdata/example.rules.test.yml")
	if err != nil {
		t.Fatal(err)
	}
	var ut unitTests
	if err := yaml.Unmarshal(raw, &ut); err != nil {
		t.Fatal(err)
	}
	type key struct{ alert, severity string }
	covered := map[key]bool{}
	healthy := map[string]bool{}
	for _, tg := range ut.Tests {
		// Times at which each alert is expected silent or firing, by severity.
		silent := map[string][]time.Duration{}
		firing := map[key][]time.Duration{}
		for _, a := range tg.AlertRuleTests {
			at, err := time.ParseDuration(a.EvalTime)
			if err != nil {
				t.Fatalf("%s: eval_time %q: %v", tg.Name, a.EvalTime, err)
			}
			if len(a.ExpAlerts) == 0 {
				silent[a.Alertname] = append(silent[a.Alertname], at)
				if strings.HasPrefix(tg.Name, "healthy") {
					healthy[a.Alertname] = true
				}
			}
			for _, e := range a.ExpAlerts {
				labels, _ := e["exp_labels"].(map[string]any)
				sev, _ := labels["severity"].(string)
				firing[key{a.Alertname, sev}] = append(firing[key{a.Alertname, sev}], at)
			}
		}
		for k, times := range firing {
			for _, at := range times {
				before := at - time.Minute
				for _, s := range silent[k.alert] {
					if s == before {
						covered[k] = true
					}
				}
				// Or: the alert fires at a lower severity just before, and
				// this severity's rule was silent then (same name).
				for k2, times2 := range firing {
					if k2.alert == k.alert && k2.severity != k.severity {
						for _, s := range times2 {
							if s == before && !contains(firing[k], before) {
								covered[k] = true
							}
						}
					}
				}
			}
		}
	}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !covered[key{r.Alert, r.Labels["severity"]}] {
				t.Errorf("%s (%s) has no promtool case silent 1m before and firing at its for: %s", r.Alert, r.Labels["severity"], r.For)
			}
			if !healthy[r.Alert] {
				t.Errorf("%s is not checked silent in the healthy pipeline", r.Alert)
			}
		}
	}
}

func contains(ds []time.Duration, d time.Duration) bool {
	for _, x := range ds {
		if x == d {
			return true
		}
	}
	return false
}

var camelOutbox = regexp.MustCompile(`^Outbox([A-Z][a-z0-9]*)+$`)

// TestConventions checks the monitoring-mixin conventions on every alert,
// and that its runbook_url points at a section of deploy/runbook.md that
// says what to check and how to repair.
func TestConventions(t *testing.T) {
	cfg := exampleConfig(t)
	f, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runbook, err := os.ReadFile("../deploy/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := runbookSections(string(runbook))
	alerts := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				if !strings.HasPrefix(r.Record, "outbox:") || strings.Count(r.Record, ":") != 2 {
					t.Errorf("recording rule %q is not level:metric:operations", r.Record)
				}
				continue
			}
			alerts++
			if !camelOutbox.MatchString(r.Alert) {
				t.Errorf("%s is not CamelCase with the Outbox prefix", r.Alert)
			}
			if s := r.Labels["severity"]; s != SeverityCritical && s != SeverityWarning {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			if r.For == "" {
				t.Errorf("%s has no for:", r.Alert)
			}
			a := r.Annotations
			if a["summary"] == "" || strings.Contains(a["summary"], "{{") {
				t.Errorf("%s: summary %q must be a plain sentence", r.Alert, a["summary"])
			}
			d := a["description"]
			if !strings.Contains(d, "$labels.") && !strings.HasPrefix(r.Expr, "absent(") {
				t.Errorf("%s: description names no label: %q", r.Alert, d)
			}
			// An alert whose value is a constant (absent() is 1, "== 0"
			// is 0) has nothing to say with $value.
			constant := strings.HasPrefix(r.Expr, "absent(") || strings.HasSuffix(r.Expr, "== 0")
			if !strings.Contains(d, "$value") && !constant {
				t.Errorf("%s: description has no $value: %q", r.Alert, d)
			}
			anchor, ok := strings.CutPrefix(a["runbook_url"], cfg.Alerting.RunbookURL+"#")
			if !ok {
				t.Errorf("%s: runbook_url %q is not under %s", r.Alert, a["runbook_url"], cfg.Alerting.RunbookURL)
				continue
			}
			body, ok := sections[anchor]
			if !ok {
				t.Errorf("%s: deploy/runbook.md has no section #%s", r.Alert, anchor)
				continue
			}
			sev := strings.SplitN(body[strings.Index(body, "**Severity:**")+1:], "\n\n", 2)[0]
			if !strings.Contains(sev, r.Labels["severity"]) {
				t.Errorf("%s: runbook section #%s does not give severity %s", r.Alert, anchor, r.Labels["severity"])
			}
			for _, want := range []string{"**Meaning.**", "**Check.**", "**Repair.**"} {
				if !strings.Contains(body, want) {
					t.Errorf("%s: runbook section #%s lacks %q", r.Alert, anchor, want)
				}
			}
		}
	}
	if alerts < 14 {
		t.Errorf("only %d alerts", alerts)
	}
}

// runbookSections maps the anchor of each "## " heading to its text.
func runbookSections(md string) map[string]string {
	out := map[string]string{}
	var anchor string
	var body strings.Builder
	flush := func() {
		if anchor != "" {
			out[anchor] = body.String()
		}
		body.Reset()
	}
	for _, line := range strings.Split(md, "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			flush()
			anchor = Anchor(h)
			continue
		}
		body.WriteString(line + "\n")
	}
	flush()
	return out
}

func TestAnchor(t *testing.T) {
	for in, want := range map[string]string{
		"OutboxDeadEvents":            "outboxdeadevents",
		"What to check, and why?":     "what-to-check-and-why",
		"  Reconcile: missing_outbox": "reconcile-missing_outbox",
	} {
		if got := Anchor(in); got != want {
			t.Errorf("Anchor(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestScheduleInterval(t *testing.T) {
	for _, c := range []struct {
		spec string
		want time.Duration
	}{
		{"@every 5m", 5 * time.Minute},
		{"@every 90s", 90 * time.Second},
		{"*/10 * * * *", 10 * time.Minute},
		{"0 3 * * *", 24 * time.Hour},
		{"@hourly", time.Hour},
		{"@daily", 24 * time.Hour},
		{"0 9,17 * * *", 16 * time.Hour},
		{"0 3 * * 1", 7 * 24 * time.Hour},
		{"not a schedule", DefaultReconcileInterval},
		{"@every nonsense", DefaultReconcileInterval},
	} {
		if got := ScheduleInterval(c.spec); got != c.want {
			t.Errorf("ScheduleInterval(%q) = %v, want %v", c.spec, got, c.want)
		}
	}
}

// TestBuildFollowsConfig: rules exist only for what the config monitors,
// selectors follow alerting.selector, objectives and intervals come from
// the config.
func TestBuildFollowsConfig(t *testing.T) {
	const yml = `
databases:
  db: {dsn: "postgres://x@localhost/db"}
outboxes:
  plain:
    database: db
    table: outbox
    id: id
    created_at: created_at
    deadline: 1m
  timed:
    database: db
    table: outbox2
    id: id
    created_at: created_at
    published_at: published_at
    dead_at: dead_at
    claimed_at: claimed_at
    lease_ttl: 2m
    attempts: attempts
    labels: {kind: kind}
    deadline: 10m
    slo_objective: 0.99
reconcile:
  nightly:
    schedule: "0 2 * * *"
    authority: {database: db, table: t, key: id, version: v, created_at: c}
    outbox: {name: timed, key: k, version: v}
`
	cfg, err := config.Parse([]byte(yml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	f, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{
		`outbox_oldest_pending_age_seconds{outbox="plain"}`, // no selector configured
		`max by (job, outbox, kind) (outbox_oldest_pending_age_seconds{outbox="timed"})`,
		`outbox:published_late_events:ratio_rate1h{outbox="timed"} > (14.4 * (1 - 0.99))`,
		`outbox_events{outbox="timed", state="dead"}`,    // dead_at
		`outbox_lease_expirations_total{outbox="timed"}`, // claimed_at + lease_ttl
		`outbox_unknown_result_events{outbox="timed"}`,   // lease + attempts
		`reconcile="nightly"}) > 259200`,                 // 3 x 24h
		`absent(outbox_exporter_build_info)`,
		`runbook_url: ` + DefaultRunbookURL + `#outboxnotificationdeadlinemissed`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("rules lack %s", want)
		}
	}
	for _, unwanted := range []string{
		`outbox:published_late_events:ratio_rate1h{outbox="plain"}`, // no published_at
		`outbox_lease_expirations_total{outbox="plain"}`,
		`outbox_events{outbox="plain", state="dead"}`,
		`OutboxConsumerLagAboveDeadline`, // no kafka
		`OutboxAudit`,                    // no audit
	} {
		if strings.Contains(text, unwanted) {
			t.Errorf("rules contain %s", unwanted)
		}
	}
}
