package alerts

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// reconcileCase is a seeded history of the search_index job (every 5m:
// limit 10m) minute by minute: whether the exporter is up, and whether a
// run succeeds. The exporter restarts now and then, for at most 4
// minutes: longer outages are OutboxExporterAbsent's.
type reconcileCase struct {
	minutes int
	up      []bool
	success []bool
	// added is the minute the job enters the config.
	added int
	// closed is whether a range reaches its start (Prometheus 2) or not
	// (Prometheus 3).
	closed bool
}

func newReconcileCase(seed uint64, closed bool) reconcileCase {
	r := rand.New(rand.NewPCG(seed, 5))
	c := reconcileCase{minutes: 120, added: r.IntN(20), closed: closed}
	pSuccess := []float64{0, 0.05, 0.2, 0.6}[r.IntN(4)]
	down := 0
	for m := 0; m <= c.minutes; m++ {
		if down == 0 && m > c.added && r.IntN(25) == 0 {
			down = 1 + r.IntN(4)
		}
		up := m >= c.added && down == 0
		if down > 0 {
			down--
		}
		if m%30 == 0 {
			pSuccess = []float64{0, 0.05, 0.2, 0.6}[r.IntN(4)]
		}
		c.up = append(c.up, up)
		c.success = append(c.success, up && m%5 == 0 && r.Float64() < pSuccess)
	}
	return c
}

// series renders the two series the exporter would export: running (0,
// present while up) and the last success (present while up, from the
// first success since the process started, valued at that success's
// time in seconds).
func (c reconcileCase) series() (running, lastSuccess string) {
	var run, last []string
	cur := -1 // last success of the running process, -1 for none
	for m := 0; m <= c.minutes; m++ {
		if !c.up[m] {
			cur = -1
			run, last = append(run, "_"), append(last, "_")
			continue
		}
		if c.success[m] {
			cur = m * 60
		}
		run = append(run, "0")
		if cur < 0 {
			last = append(last, "_")
		} else {
			last = append(last, fmt.Sprint(cur))
		}
	}
	return strings.Join(run, " "), strings.Join(last, " ")
}

// seen returns the last-success values Prometheus holds for the minutes
// from..to: each minute the exporter is up and its process has had a
// success, that success's time.
func (c reconcileCase) seen(from, to int) []int {
	var out []int
	cur := -1
	for m := 0; m <= to; m++ {
		switch {
		case !c.up[m]:
			cur = -1
		case c.success[m]:
			cur = m * 60
		}
		if m >= from && c.up[m] && cur >= 0 {
			out = append(out, cur)
		}
	}
	return out
}

// notSucceeding is the brute-force truth at minute m, worked out from
// every sample: the newest success Prometheus saw in the last limit is
// older than the limit (the value is its age); or it saw none there
// while the job was watched in the limit before that (the value is the
// limit, a lower bound).
func (c reconcileCase) notSucceeding(m int, limit int) (int, bool) {
	l := limit / 60
	if vals := c.seen(max(0, rangeStart(m, l, c.closed)), m); len(vals) > 0 {
		newest := vals[0]
		for _, v := range vals {
			newest = max(newest, v)
		}
		return m*60 - newest, m*60-newest > limit
	}
	for t := max(0, rangeStart(m-l, l, c.closed)); t <= m-l; t++ {
		if c.up[t] {
			return limit, true
		}
	}
	return 0, false
}

// TestReconcileNotSucceedingAgainstBruteForce runs seeded histories of
// restarts and successes through the generated OutboxReconcileNotSucceeding
// rule of search_index in promtool, against the brute-force truth with its
// for: of 5m. A seed that fails is kept in the list as a regression case.
func TestReconcileNotSucceedingAgainstBruteForce(t *testing.T) {
	withEachPromtool(t, reconcileAgainstBruteForce)
}

// reconcileAgainstBruteForce is TestReconcileNotSucceedingAgainstBruteForce
// with one promtool, whose ranges are closed or not.
func reconcileAgainstBruteForce(t *testing.T, promtool string, closed bool) {
	rules, err := filepath.Abs("testdata/multi.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	limit := int(SuccessLimit("@every 5m") / time.Second)
	fired, silent := 0, 0
	var tests []any
	for _, seed := range []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10} {
		c := newReconcileCase(seed, closed)
		run, last := c.series()
		lab := `{job="outbox_exporter", k8s_cluster="eu", instance="exporter-1:9899", reconcile="search_index"}`
		var checks []any
		for m := 5; m <= c.minutes; m++ {
			held := true
			for t := m - 5; t <= m; t++ {
				if _, ok := c.notSucceeding(t, limit); !ok {
					held = false
				}
			}
			exp := []any{}
			if held {
				fired++
				v, _ := c.notSucceeding(m, limit)
				exp = append(exp, map[string]any{
					"exp_labels": map[string]string{"severity": "warning", "job": "outbox_exporter", "k8s_cluster": "eu", "reconcile": "search_index"},
					"exp_annotations": map[string]string{
						"summary":     "A reconcile job has not succeeded since its last scheduled run should have ended.",
						"description": fmt.Sprintf("Reconcile job search_index has not succeeded for %s, longer than one interval of its schedule (every 5m) and the 5m a run may take: the run that should have ended by now failed, never ran or never ended. Lost events go unnoticed meanwhile.", humanizeDuration(v)),
						"runbook_url": DefaultRunbookURL + "#outboxreconcilenotsucceeding",
					},
				})
			} else {
				silent++
			}
			checks = append(checks, map[string]any{"eval_time": fmt.Sprintf("%dm", m), "alertname": "OutboxReconcileNotSucceeding", "exp_alerts": exp})
		}
		tests = append(tests, map[string]any{"name": fmt.Sprintf("seed %d", seed), "interval": "1m",
			"input_series": []map[string]string{
				{"series": "outbox_reconcile_running_seconds" + lab, "values": run},
				{"series": "outbox_reconcile_last_success_timestamp_seconds" + lab, "values": last},
			},
			"alert_rule_test": checks})
	}
	if fired < 20 || silent < 20 {
		t.Fatalf("the seeds assert %d firing and %d silent minutes: too few", fired, silent)
	}
	t.Logf("%d firing, %d silent minutes asserted", fired, silent)
	b, err := yaml.Marshal(map[string]any{"rule_files": []string{rules}, "evaluation_interval": "1m", "tests": tests})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "reconcile.test.yml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", p).CombinedOutput(); err != nil {
		t.Fatalf("promtool disagrees with the brute force (keep the seed):\n%s", tail(string(out), 6000))
	}
}

// humanizeDuration renders whole seconds as Prometheus's
// humanizeDuration does: "10m 0s", "1h 2m 0s", "1d 6h 0m 0s".
func humanizeDuration(sec int) string {
	d, h, m, s := sec/86400, sec/3600%24, sec/60%60, sec%60
	switch {
	case d > 0:
		return fmt.Sprintf("%dd %dh %dm %ds", d, h, m, s)
	case h > 0:
		return fmt.Sprintf("%dh %dm %ds", h, m, s)
	case m > 0:
		return fmt.Sprintf("%dm %ds", m, s)
	}
	return fmt.Sprintf("%ds", s)
}
