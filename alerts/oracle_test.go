package alerts

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// collectorCase is one seeded history of collector_success samples, one a
// minute, for replicas × (collector, target) series.
type collectorCase struct {
	seed    uint64
	minutes int
	// closed is whether a range reaches its start: Prometheus 2 reads
	// [t-15m, t], Prometheus 3 (t-15m, t].
	closed bool
	// success[replica][series][minute] is 0 or 1.
	success [][][]int
	series  [][2]string
}

func newCollectorCase(seed uint64, closed bool) collectorCase {
	r := rand.New(rand.NewPCG(seed, 17))
	c := collectorCase{seed: seed, minutes: 60, closed: closed, series: [][2]string{{"outbox", "messages"}, {"kafka", "main"}}}
	probs := []float64{0, 0.1, 0.3, 0.6, 0.9, 1}
	for range 2 {
		var rep [][]int
		for range c.series {
			p := probs[r.IntN(len(probs))]
			// Failures come in runs now and then: the share moves
			// across the thresholds within one history.
			var s []int
			for m := 0; m <= c.minutes; m++ {
				if m%20 == 0 {
					p = probs[r.IntN(len(probs))]
				}
				v := 1
				if r.Float64() < p {
					v = 0
				}
				s = append(s, v)
			}
			rep = append(rep, s)
		}
		c.success = append(c.success, rep)
	}
	return c
}

// failedShare is the brute-force share of failed samples in the 15
// minutes up to and including minute m (the sample 15 minutes before
// only where ranges are closed), as an exact fraction.
func (c collectorCase) failedShare(rep, s, m int) *big.Rat {
	failed, n := 0, 0
	for t := max(0, rangeStart(m, 15, c.closed)); t <= m; t++ {
		n++
		failed += 1 - c.success[rep][s][t]
	}
	return big.NewRat(int64(failed), int64(n))
}

// firing works out by brute force which alerts fire at minute m: a
// condition true at every evaluation from m-5 to m (for: 5m). ok is
// false when a share on that span sits exactly on a threshold, where
// floating point may decide either way: that minute is not asserted.
func (c collectorCase) firing(m int) (perReplica [][2]int, everywhere []int, ok bool) {
	if m < 5 {
		return nil, nil, true
	}
	quarter, half := big.NewRat(1, 4), big.NewRat(1, 2)
	for s := range c.series {
		all := true
		for rep := range c.success {
			held := true
			for t := m - 5; t <= m; t++ {
				share := c.failedShare(rep, s, t)
				if share.Cmp(quarter) == 0 || share.Cmp(half) == 0 {
					return nil, nil, false
				}
				if share.Cmp(quarter) <= 0 {
					held = false
				}
			}
			if held {
				perReplica = append(perReplica, [2]int{rep, s})
			}
		}
		for t := m - 5; t <= m; t++ {
			minShare := c.failedShare(0, s, t)
			for rep := range c.success {
				if sh := c.failedShare(rep, s, t); sh.Cmp(minShare) < 0 {
					minShare = sh
				}
			}
			if minShare.Cmp(half) <= 0 {
				all = false
			}
		}
		if all {
			everywhere = append(everywhere, s)
		}
	}
	return perReplica, everywhere, true
}

// humanizePercentage renders a share as Prometheus's humanizePercentage
// does for values from 1% to 999%: four significant digits.
func humanizePercentage(r *big.Rat) string {
	f, _ := r.Float64()
	return fmt.Sprintf("%.4g%%", f*100)
}

// TestCollectorAlertsAgainstBruteForce runs seeded random histories of
// collector successes on two replicas through the generated
// OutboxCollectorFailing and OutboxCollectorFailingEverywhere rules in
// promtool, against the alerts worked out by brute force over every
// sample. A seed that fails is kept in seeds as a regression case.
func TestCollectorAlertsAgainstBruteForce(t *testing.T) {
	withEachPromtool(t, collectorAgainstBruteForce)
}

// withEachPromtool runs test as a subtest with each promtool (2.x and
// 3.x), telling it whether that promtool's ranges are closed.
func withEachPromtool(t *testing.T, test func(t *testing.T, promtool string, closed bool)) {
	for _, promtool := range testutil.Promtools(t) {
		closed := rangesClosed(t, promtool)
		t.Run(promtoolName(closed), func(t *testing.T) { test(t, promtool, closed) })
	}
}

// collectorAgainstBruteForce is TestCollectorAlertsAgainstBruteForce with
// one promtool, whose ranges are closed or not.
func collectorAgainstBruteForce(t *testing.T, promtool string, closed bool) {
	rules, err := filepath.Abs("testdata/multi.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	var tests []any
	firingChecks, everywhereChecks, silentChecks := 0, 0, 0
	inst := []string{"exporter-1:9899", "exporter-2:9899"}
	for _, seed := range seeds {
		c := newCollectorCase(seed, closed)
		var input []map[string]string
		for rep := range c.success {
			for s, ct := range c.series {
				vals := make([]string, len(c.success[rep][s]))
				for i, v := range c.success[rep][s] {
					vals[i] = fmt.Sprint(v)
				}
				input = append(input, map[string]string{
					"series": fmt.Sprintf(`outbox_exporter_collector_success{job="outbox_exporter", k8s_cluster="eu", instance=%q, collector=%q, target=%q}`, inst[rep], ct[0], ct[1]),
					"values": strings.Join(vals, " "),
				})
			}
		}
		checks, f, e, q := collectorChecks(c, inst)
		firingChecks, everywhereChecks, silentChecks = firingChecks+f, everywhereChecks+e, silentChecks+q
		tests = append(tests, map[string]any{"name": fmt.Sprintf("seed %d", seed), "interval": "1m", "input_series": input, "alert_rule_test": checks})
	}
	// The seeds must exercise both alerts and quiet minutes, or the
	// comparison proves nothing.
	if firingChecks < 20 || everywhereChecks < 5 || silentChecks < 20 {
		t.Fatalf("the seeds assert %d firing, %d everywhere and %d silent minutes: too few", firingChecks, everywhereChecks, silentChecks)
	}
	t.Logf("%d firing, %d everywhere, %d silent minutes asserted", firingChecks, everywhereChecks, silentChecks)
	doc := map[string]any{"rule_files": []string{rules}, "evaluation_interval": "1m", "tests": tests}
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "collector.test.yml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "test", "rules", p).CombinedOutput()
	if err != nil {
		seen := map[string]bool{}
		var failed []string
		for _, line := range strings.Split(string(out), "\n") {
			if l := strings.Trim(strings.TrimSpace(line), ","); strings.HasPrefix(l, "name: seed") && !seen[l] {
				seen[l] = true
				failed = append(failed, strings.TrimPrefix(l, "name: "))
			}
		}
		sort.Strings(failed)
		t.Fatalf("promtool disagrees with the brute force (%s; keep the seed):\n%s", strings.Join(failed, "; "), tail(string(out), 4000))
	}
}

// collectorChecks are the promtool checks of one seeded history: at each
// minute the brute force can judge, the alerts of both rules, with how
// many firing per replica, firing everywhere, and silent minutes.
func collectorChecks(c collectorCase, inst []string) (checks []any, firing, everywhere, silent int) {
	for m := 0; m <= c.minutes; m++ {
		per, every, ok := c.firing(m)
		if !ok {
			continue
		}
		var failing, everywhereAlerts []any
		for _, rs := range per {
			rep, s := rs[0], rs[1]
			share := c.failedShare(rep, s, m)
			failing = append(failing, map[string]any{
				"exp_labels": map[string]string{"severity": "warning", "job": "outbox_exporter", "k8s_cluster": "eu", "instance": inst[rep], "collector": c.series[s][0], "target": c.series[s][1]},
				"exp_annotations": map[string]string{
					"summary":     "An outbox_exporter collector is failing.",
					"description": fmt.Sprintf("Collector %s for target %s on %s failed %s of its collections over the last 15m: its metrics come and go and the alerts on them may not fire.", c.series[s][0], c.series[s][1], inst[rep], humanizePercentage(share)),
					"runbook_url": DefaultRunbookURL + "#outboxcollectorfailing",
				},
			})
		}
		for _, s := range every {
			minShare := c.failedShare(0, s, m)
			if sh := c.failedShare(1, s, m); sh.Cmp(minShare) < 0 {
				minShare = sh
			}
			everywhereAlerts = append(everywhereAlerts, map[string]any{
				"exp_labels": map[string]string{"severity": "critical", "job": "outbox_exporter", "k8s_cluster": "eu", "collector": c.series[s][0], "target": c.series[s][1]},
				"exp_annotations": map[string]string{
					"summary":     "An outbox_exporter collector fails on every replica.",
					"description": fmt.Sprintf("Collector %s for target %s in k8s_cluster eu failed at least %s of its collections over the last 15m on every replica: the alerts on its metrics (deadlines, lag, loss) cannot fire.", c.series[s][0], c.series[s][1], humanizePercentage(minShare)),
					"runbook_url": DefaultRunbookURL + "#outboxcollectorfailingeverywhere",
				},
			})
		}
		firing += len(failing)
		everywhere += len(everywhereAlerts)
		if len(failing) == 0 && len(everywhereAlerts) == 0 {
			silent++
		}
		at := fmt.Sprintf("%dm", m)
		checks = append(checks,
			map[string]any{"eval_time": at, "alertname": "OutboxCollectorFailing", "exp_alerts": nonNil(failing)},
			map[string]any{"eval_time": at, "alertname": "OutboxCollectorFailingEverywhere", "exp_alerts": nonNil(everywhereAlerts)})
	}
	return checks, firing, everywhere, silent
}

// rangeStart is the first minute a range of w minutes evaluated at
// minute m reads: Prometheus 2 takes both ends ([m-w, m]), Prometheus 3
// leaves out the start ((m-w, m]).
func rangeStart(m, w int, closed bool) int {
	if closed {
		return m - w
	}
	return m - w + 1
}

// rangesClosed reports whether promtool's ranges take the sample at
// their start: Prometheus 2's do, 3's do not. Debian's promtool says
// "version 2.x"; the one scripts/deps.sh builds from the module proxy
// carries no version, and is 3.x.
func rangesClosed(t *testing.T, promtool string) bool {
	t.Helper()
	out, err := exec.Command(promtool, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", promtool, err, out)
	}
	v := string(out)
	switch {
	case strings.Contains(v, "version 2."):
		return true
	case strings.Contains(v, "version 3."), strings.Contains(v, "version  ("):
		return false
	}
	t.Fatalf("%s: cannot tell Prometheus 2 from 3 in %q", promtool, v)
	return false
}

// promtoolName names a promtool run for a subtest: 2.x or 3.x.
func promtoolName(closed bool) string {
	if closed {
		return "promtool-2.x"
	}
	return "promtool-3.x"
}

func nonNil(a []any) []any {
	if a == nil {
		return []any{}
	}
	return a
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
