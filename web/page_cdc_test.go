package web

import (
	"strings"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// The page's CDC section judges each slot: lag against its deadline, a
// connector not holding the slot, WAL about to go or gone, a slot that is
// gone, and a slot whose collection failed; and shows lag (with the least
// it can be beside an upper bound), wal_status and the connector for each.
func TestCDCSection(t *testing.T) {
	cdc := func(name string, v float64, extra ...string) Sample {
		l := map[string]string{"cdc": name}
		for i := 0; i+1 < len(extra); i += 2 {
			l[extra[i]] = extra[i+1]
		}
		return Sample{Labels: l, Value: v}
	}
	names := []string{"fine", "late", "idle", "gone", "lost", "failed", "bound", "upper", "dated"}
	snap := &Snapshot{Metrics: map[string][]Sample{}}
	for _, n := range names {
		snap.Metrics[vocab.CDCDeadline] = append(snap.Metrics[vocab.CDCDeadline], cdc(n, 60))
		if n == "failed" {
			continue
		}
		missing := 0.0
		if n == "gone" {
			missing = 1
		}
		snap.Metrics[vocab.CDCSlotMissing] = append(snap.Metrics[vocab.CDCSlotMissing], cdc(n, missing))
		if n == "gone" {
			continue
		}
		lag, active, status, bound, upper, atLeast := 5.0, 1.0, "reserved", 0.0, 0.0, 0.0
		switch n {
		case "late":
			lag = 90
		case "idle":
			active = 0
		case "lost":
			status = "lost"
		case "bound":
			bound, lag = 1, 10
		case "upper":
			upper, lag = 1, 20
		case "dated":
			upper, lag, atLeast = 1, 7200, 42
		}
		snap.Metrics[vocab.CDCSlotLagSeconds] = append(snap.Metrics[vocab.CDCSlotLagSeconds], cdc(n, lag))
		snap.Metrics[vocab.CDCSlotLagAtLeastSeconds] = append(snap.Metrics[vocab.CDCSlotLagAtLeastSeconds], cdc(n, atLeast))
		snap.Metrics[vocab.CDCSlotLagBytes] = append(snap.Metrics[vocab.CDCSlotLagBytes], cdc(n, 4096))
		snap.Metrics[vocab.CDCSlotLagLowerBound] = append(snap.Metrics[vocab.CDCSlotLagLowerBound], cdc(n, bound))
		snap.Metrics[vocab.CDCSlotLagUpperBound] = append(snap.Metrics[vocab.CDCSlotLagUpperBound], cdc(n, upper))
		snap.Metrics[vocab.CDCSlotActive] = append(snap.Metrics[vocab.CDCSlotActive], cdc(n, active))
		for _, s := range []string{"reserved", "extended", "unreserved", "lost"} {
			v := 0.0
			if s == status {
				v = 1
			}
			snap.Metrics[vocab.CDCSlotWALStatus] = append(snap.Metrics[vocab.CDCSlotWALStatus], cdc(n, v, "status", s))
		}
	}
	views := cdcViews(snap)
	got := map[string]Status{}
	for _, v := range views {
		got[v.CDC] = v.Status
	}
	want := map[string]Status{"fine": OK, "late": Crit, "idle": Warn, "gone": Crit, "lost": Crit, "failed": Unknown, "bound": OK, "upper": OK, "dated": Crit}
	for n, st := range want {
		if got[n] != st {
			t.Errorf("cdc %s: status %q, want %q", n, got[n], st)
		}
	}
	var page strings.Builder
	if err := pageTmpl.Execute(&page, pageData{HaveData: true, CDC: views}); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	for _, want := range []string{
		`<h2 id="cdc">Change data capture</h2>`,
		`data-cdc="gone" data-status="crit"`, "the replication slot does not exist",
		`data-cdc="failed" data-status="unknown"`, "not read: its collection failed",
		`data-cdc="idle" data-status="warn"`, "not holding the slot",
		`data-cdc="late" data-status="crit"`, "1m30",
		"&ge; 10s", ">&le; 20s", "42s to &le; 2h", "<td>lost</td>", "<td>reserved</td>", "4096 bytes", "streaming",
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// fmtSeconds drops only a zero field: 1m30s once read "1m3", 2h50m "2h5".
func TestFmtSeconds(t *testing.T) {
	for sec, want := range map[float64]string{42: "42s", 90: "1m30s", 180: "3m", 600: "10m", 7200: "2h", 7500: "2h5m", 10200: "2h50m"} {
		if got := fmtSeconds(sec); got != want {
			t.Errorf("fmtSeconds(%v) = %q, want %q", sec, got, want)
		}
	}
}
