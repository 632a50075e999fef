package alerts

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// requireTool finds a binary the checks run, failing (not skipping) with
// how to install it when it is missing.
var requireTool = testutil.RequireTool

// TestPromtoolCheckRules runs promtool's checks with every lint fatal on
// the rules of the example and of the config with two of everything:
// rules that repeat per outbox, Kafka cluster or reconcile job must not
// be duplicates.
func TestPromtoolCheckRules(t *testing.T) {
	for _, promtool := range testutil.Promtools(t) {
		for _, f := range []string{"testdata/example.rules.yml", "testdata/multi.rules.yml", "testdata/generic.rules.yml"} {
			out, err := exec.Command(promtool, "check", "rules", "--lint=all", "--lint-fatal", f).CombinedOutput()
			if err != nil {
				t.Errorf("%s check rules --lint=all --lint-fatal %s: %v\n%s", promtool, f, err, out)
			}
		}
	}
}

// TestPromtoolLintFindsDuplicates proves the check above can fail: the
// rules of two outboxes without the labels that tell them apart are
// duplicates to promtool.
func TestPromtoolLintFindsDuplicates(t *testing.T) {
	f, err := Build(multiConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	for gi := range f.Groups {
		for ri := range f.Groups[gi].Rules {
			r := &f.Groups[gi].Rules[ri]
			if r.Alert != "" {
				r.Labels = map[string]string{"severity": r.Labels["severity"]}
			}
		}
	}
	b, err := Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "dup.rules.yml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, promtool := range testutil.Promtools(t) {
		out, err := exec.Command(promtool, "check", "rules", "--lint=all", "--lint-fatal", p).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "duplicate") {
			t.Errorf("%s passed rules without their telling labels: %v\n%s", promtool, err, out)
		}
	}
}

// TestPromtoolTestRules runs the promtool tests of multi.yml's rules with
// Debian's promtool 2.x and with 3.x.
func TestPromtoolTestRules(t *testing.T) {
	for _, promtool := range testutil.Promtools(t) {
		out, err := exec.Command(promtool, "test", "rules", "testdata/multi.rules.test.yml").CombinedOutput()
		if err != nil {
			t.Errorf("%s test rules: %v\n%s", promtool, err, out)
		}
	}
}

// unitTests is the part of a promtool test file the coverage check reads.
type unitTests struct {
	Tests []struct {
		Name           string `yaml:"name"`
		AlertRuleTests []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels map[string]string `yaml:"exp_labels"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// ruleKey tells generated alerting rules apart: the alert's name and the
// labels the rule sets (severity, and outbox, cluster, reconcile, long
// and short where one name has a rule per item). An alert matches a rule
// when it carries all of the rule's labels.
func ruleKey(r Rule) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.Labels)) {
		parts = append(parts, k+"="+r.Labels[k])
	}
	return r.Alert + "{" + strings.Join(parts, ",") + "}"
}

// matches reports whether an expected alert's labels carry every label r
// sets.
func matches(r Rule, labels map[string]string) bool {
	for k, v := range r.Labels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestEveryAlertIsTestedAroundItsFor checks that the promtool tests cover
// every generated alerting rule of multi.yml: for each rule, a test group
// where it fires at some evaluation and did not fire one evaluation (1m)
// before (so its for: is what held it back); and a healthy group where
// nothing fires.
func TestEveryAlertIsTestedAroundItsFor(t *testing.T) {
	f, err := Build(multiConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("testdata/multi.rules.test.yml")
	if err != nil {
		t.Fatal(err)
	}
	var ut unitTests
	if err := yaml.Unmarshal(raw, &ut); err != nil {
		t.Fatal(err)
	}
	var rules []Rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				rules = append(rules, r)
			}
		}
	}
	covered := map[string]bool{}
	healthy := map[string]bool{}
	for _, tg := range ut.Tests {
		// firing[alertname][eval time] lists the expected alerts' labels;
		// an entry with none is a silent check.
		firing := map[string]map[time.Duration][]map[string]string{}
		for _, a := range tg.AlertRuleTests {
			at, err := model.ParseDuration(a.EvalTime)
			if err != nil {
				t.Fatalf("%s: eval_time %q: %v", tg.Name, a.EvalTime, err)
			}
			if firing[a.Alertname] == nil {
				firing[a.Alertname] = map[time.Duration][]map[string]string{}
			}
			at2 := time.Duration(at)
			if _, ok := firing[a.Alertname][at2]; !ok {
				firing[a.Alertname][at2] = []map[string]string{}
			}
			for _, e := range a.ExpAlerts {
				firing[a.Alertname][at2] = append(firing[a.Alertname][at2], e.ExpLabels)
			}
			if len(a.ExpAlerts) == 0 && strings.HasPrefix(tg.Name, "healthy") {
				healthy[a.Alertname] = true
			}
		}
		for _, r := range rules {
			for at, alerts := range firing[r.Alert] {
				before, checked := firing[r.Alert][at-time.Minute]
				if !checked || !slices.ContainsFunc(alerts, func(l map[string]string) bool { return matches(r, l) }) {
					continue
				}
				if !slices.ContainsFunc(before, func(l map[string]string) bool { return matches(r, l) }) {
					covered[ruleKey(r)] = true
				}
			}
		}
	}
	for _, r := range rules {
		if !covered[ruleKey(r)] {
			t.Errorf("%s has no promtool case silent 1m before and firing at its for: %s", ruleKey(r), r.For)
		}
		if !healthy[r.Alert] {
			t.Errorf("%s is not checked silent in the healthy pipeline", r.Alert)
		}
	}
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
		`reconcile="nightly"}[1d6h])) > 108000`,          // 24h + 6h, not 3 x 24h
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

// The order and receipt alerts exist only for outboxes and audits with
// aggregate, sequence and receipt, which deploy/example.yml has.
func TestPromtoolTestOrderRules(t *testing.T) {
	for _, promtool := range testutil.Promtools(t) {
		out, err := exec.Command(promtool, "test", "rules", "testdata/order.rules.test.yml").CombinedOutput()
		if err != nil {
			t.Errorf("%s test rules: %v\n%s", promtool, err, out)
		}
	}
}
