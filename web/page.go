package web

import (
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/version"

	"github.com/outbox-exporter/outbox_exporter/internal/leader"
	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
	"github.com/outbox-exporter/outbox_exporter/web/history"
)

//go:embed page.html
var pageFS embed.FS

var pageTmpl = template.Must(template.New("page.html").Funcs(template.FuncMap{
	"dur":   fmtSeconds,
	"num":   func(f float64) string { return fmt.Sprintf("%.0f", f) },
	"query": url.QueryEscape,
}).ParseFS(pageFS, "page.html"))

// Status colours a part of the pipeline against its deadline.
type Status string

const (
	OK      Status = "ok"      // green: well within its deadline
	Warn    Status = "warn"    // amber: past half its deadline, or something needs a look
	Crit    Status = "crit"    // red: past its deadline, or data lost
	Unknown Status = "unknown" // grey: no data yet, or its collector failed
)

// statusFor compares an age with its deadline: red at or past it, amber
// past half of it.
func statusFor(age, deadline float64) Status {
	switch {
	case deadline <= 0:
		return Unknown
	case age >= deadline:
		return Crit
	case age >= deadline/2:
		return Warn
	}
	return OK
}

func worst(ss ...Status) Status {
	rank := map[Status]int{OK: 0, Unknown: 1, Warn: 2, Crit: 3}
	w := OK
	for _, s := range ss {
		if rank[s] > rank[w] {
			w = s
		}
	}
	return w
}

type outboxView struct {
	Name         string
	Status       Status
	OldestAge    float64
	Deadline     float64
	PastDeadline float64
	// NoAge: the outbox's table keeps no creation time, so no age or
	// deadline is known (shown as such, not as 0).
	NoAge        bool
	States       []stateCount
	Retried      float64
	Unknown      float64
	LeaseExpired float64
	Dead         float64
	CollectorOK  bool
	Trend        template.HTML
	Stuck        []StuckView
	StuckErr     string
}

type stateCount struct {
	State string
	Count float64
}

// StuckView is one of the oldest unpublished rows shown on the page.
type StuckView struct {
	ID    string
	State string
	Age   float64
	// AgeUnknown: the outbox's table keeps no creation time.
	AgeUnknown bool
	Attempts   int64
	LastError  string
	// Order, for a row out of order: its aggregate and sequence and the
	// published sequence that overtook it.
	Order string
}

type groupView struct {
	Cluster, Group string
	Status         Status
	LagSeconds     float64
	LagMessages    float64
	Deadline       float64
	Members        float64
	// Uncommitted is the partitions the group has no committed offset on
	// while it has members for them or committed to their topic's other
	// partitions: their lag is unknown.
	Uncommitted float64
	Trend       template.HTML
}

type reconcileView struct {
	Job         string
	Status      Status
	LastSuccess string
	Rows        float64
	Gaps        []stateCount
	Findings    []FindingView
}

// FindingView is one reconcile finding shown on the page.
type FindingView struct {
	Key, Kind, AuthorityVersion, TargetVersion, OutboxState string
}

type auditView struct {
	Outbox     string
	Status     Status
	Missing    float64
	Unmarked   float64
	Duplicates float64
	Checked    float64
}

type collectorView struct {
	Collector, Target string
	OK                bool
	Duration          float64
}

type pageData struct {
	Version     string
	Now         time.Time
	SnapshotAt  time.Time
	HaveData    bool
	ReloadOK    bool
	Telemetry   string
	RunbookURL  string
	Outboxes    []outboxView
	Groups      []groupView
	ShareGroups []shareView
	Reconciles  []reconcileView
	Audits      []auditView
	CDC         []cdcView
	Collectors  []collectorView
	HistoryNote string

	// Leaders is each task leader_election shares: whether this replica
	// leads it, else who does; empty without leader_election.
	Leaders []leader.Status
}

func (s *Server) servePage(w http.ResponseWriter, r *http.Request) {
	s.freshenForPage(r.Context(), time.Now())
	d := s.pageData(r, time.Now())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pageTmpl.Execute(w, d); err != nil {
		s.log.Error("render page", "err", err)
	}
}

func (s *Server) pageData(r *http.Request, now time.Time) pageData {
	d := pageData{
		Version:    versionString(),
		Now:        now,
		Telemetry:  s.opts.TelemetryPath,
		RunbookURL: "https://github.com/outbox-exporter/outbox_exporter/blob/main/deploy/runbook.md",
		ReloadOK:   gaugeValue(s.reloadOK) == 1,
		HistoryNote: fmt.Sprintf("Trends: the last %s, one point per %s, kept in memory.",
			fmtSeconds((time.Duration(s.rec.history.Points) * s.rec.history.Step).Seconds()), fmtSeconds(s.rec.history.Step.Seconds())),
	}
	a := s.App()
	if a != nil && a.Config.Alerting.RunbookURL != "" {
		d.RunbookURL = a.Config.Alerting.RunbookURL
	}
	if a != nil && a.Leader != nil {
		d.Leaders = a.Leader.Status()
	}
	snap := s.rec.snapshot()
	if snap == nil {
		return d
	}
	d.HaveData = true
	d.SnapshotAt = snap.At
	collectorOK := map[string]bool{}
	for _, smp := range snap.Metrics[vocab.CollectorSuccess] {
		c, t := smp.Labels["collector"], smp.Labels["target"]
		collectorOK[c+"/"+t] = smp.Value == 1
		dur, _ := snap.Max(vocab.CollectorDuration, map[string]string{"collector": c, "target": t})
		d.Collectors = append(d.Collectors, collectorView{Collector: c, Target: t, OK: smp.Value == 1, Duration: dur})
	}
	sort.Slice(d.Collectors, func(i, j int) bool {
		return d.Collectors[i].Collector+d.Collectors[i].Target < d.Collectors[j].Collector+d.Collectors[j].Target
	})

	d.Outboxes = s.outboxViews(r, snap, collectorOK, now)
	d.Groups = s.groupViews(snap, collectorOK, now)
	d.ShareGroups = shareViews(snap, collectorOK)
	d.Reconciles = s.reconcileViews(snap, collectorOK, now)
	d.Audits = auditViews(snap, collectorOK)
	d.CDC = cdcViews(snap)
	return d
}

// outboxViews judges each outbox: its oldest age against the deadline of
// its own label set, its states, and its stuck rows.
func (s *Server) outboxViews(r *http.Request, snap *Snapshot, collectorOK map[string]bool, now time.Time) []outboxView {
	var out []outboxView
	for _, name := range outboxNames(snap) {
		m := map[string]string{"outbox": name}
		v := outboxView{Name: name, CollectorOK: collectorOK["outbox/"+name]}
		v.Status = OK
		// The deadline differs per label set: judge each oldest age
		// against the deadline of its own label set.
		for _, age := range snap.Get(vocab.OutboxOldestPendingAge, m) {
			dl, _ := snap.Max(vocab.OutboxDeadline, age.Labels)
			v.Status = worst(v.Status, statusFor(age.Value, dl))
			if age.Value >= v.OldestAge {
				v.OldestAge, v.Deadline = age.Value, dl
			}
		}
		if v.Deadline == 0 {
			v.Deadline, _ = snap.Max(vocab.OutboxDeadline, m)
		}
		v.PastDeadline = snap.Sum(vocab.OutboxPastDeadline, m)
		// Every collected outbox exports its deadline, but one whose table
		// keeps no creation time.
		v.NoAge = v.CollectorOK && len(snap.Get(vocab.OutboxDeadline, m)) == 0
		v.Retried = snap.Sum(vocab.OutboxRetried, m)
		v.Unknown = snap.Sum(vocab.OutboxUnknownResult, m)
		states := map[string]float64{}
		for _, smp := range snap.Get(vocab.OutboxEvents, m) {
			states[smp.Labels[vocab.LabelState]] += smp.Value
		}
		for _, st := range vocab.EventStates {
			v.States = append(v.States, stateCount{st, states[st]})
		}
		v.LeaseExpired, v.Dead = states[vocab.StateLeaseExpired], states[vocab.StateDead]
		if v.PastDeadline > 0 {
			v.Status = worst(v.Status, Crit)
		}
		if v.Unknown > 0 || v.LeaseExpired > 0 || v.Dead > 0 {
			v.Status = worst(v.Status, Warn)
		}
		if !v.CollectorOK {
			v.Status = worst(v.Status, Unknown)
		}
		v.Trend = sparkline(s.rec.history.Get(outboxKey(name), now), v.Deadline)
		if s.App() != nil {
			v.Stuck, v.StuckErr = s.stuckRows(r, name)
		}
		out = append(out, v)
	}

	return out
}

// groupViews judges each consumer group's lag against its deadline.
func (s *Server) groupViews(snap *Snapshot, collectorOK map[string]bool, now time.Time) []groupView {
	var out []groupView
	// Indexed once: a Max per group over every lag sample is groups².
	lagSec := snap.MaxBy(vocab.ConsumerLagSeconds, vocab.LabelCluster, vocab.LabelGroup)
	lagMsg := snap.SumBy(vocab.ConsumerLagMessages, vocab.LabelCluster, vocab.LabelGroup)
	members := snap.MaxBy(vocab.ConsumerGroupMembers, vocab.LabelCluster, vocab.LabelGroup)
	uncommitted := snap.SumBy(vocab.ConsumerUncommitted, vocab.LabelCluster, vocab.LabelGroup)
	shares := shareGroupSet(snap)
	for _, smp := range snap.Metrics[vocab.ConsumerDeadline] {
		c, g := smp.Labels[vocab.LabelCluster], smp.Labels[vocab.LabelGroup]
		k := [2]string{c, g}
		if shares[k] {
			continue
		}
		gv := groupView{Cluster: c, Group: g, Deadline: smp.Value}
		gv.LagSeconds, gv.LagMessages, gv.Members = lagSec[k], lagMsg[k], members[k]
		gv.Uncommitted = uncommitted[k]
		gv.Status = groupStatus(gv, collectorOK["kafka/"+c])

		gv.Trend = sparkline(s.rec.history.Get(groupKey(c, g), now), gv.Deadline)
		out = append(out, gv)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Cluster+out[i].Group < out[j].Cluster+out[j].Group
	})

	return out
}

// findingStatus is the colour of a finding on the page: that of its
// severity, the one its alert carries.
func findingStatus(metric, kind string) Status {
	if s, _ := vocab.SeverityOf(metric, kind); s == vocab.Critical {
		return Crit
	}
	return Warn
}

// groupStatus judges a group's time lag against its deadline. A group
// with partitions it has not committed to is unknown at best, never OK:
// its lag there is not known (a consumer stuck at the start looks caught
// up), and so is one whose collection failed.
func groupStatus(gv groupView, collectorOK bool) Status {
	st := statusFor(gv.LagSeconds, gv.Deadline)
	if gv.Uncommitted > 0 || !collectorOK {
		st = worst(st, Unknown)
	}
	return st
}

// reconcileViews shows each reconcile job's last run and its gaps.
func (s *Server) reconcileViews(snap *Snapshot, collectorOK map[string]bool, now time.Time) []reconcileView {
	var out []reconcileView
	for _, job := range snap.Values(vocab.ReconcileRowsChecked, vocab.LabelReconcile) {
		m := map[string]string{"reconcile": job}
		rv := reconcileView{Job: job, Status: OK}
		rv.Rows, _ = snap.Max(vocab.ReconcileRowsChecked, m)
		if ts, ok := snap.Max(vocab.ReconcileLastSuccess, m); ok && ts > 0 {
			rv.LastSuccess = fmtSeconds(now.Sub(time.Unix(int64(ts), 0)).Seconds()) + " ago"
		} else {
			rv.LastSuccess = "never"
			rv.Status = Unknown
		}
		for _, kind := range vocab.GapKinds {
			n := snap.Sum(vocab.ReconcileGaps, map[string]string{vocab.LabelReconcile: job, vocab.LabelKind: kind})
			rv.Gaps = append(rv.Gaps, stateCount{kind, n})
			if n > 0 {
				rv.Status = worst(rv.Status, findingStatus(vocab.ReconcileGaps, kind))
			}
		}
		if !collectorOK["reconcile/"+job] {
			rv.Status = worst(rv.Status, Unknown)
		}
		rv.Findings = s.reconcileFindings(job, 5)
		out = append(out, rv)
	}

	return out
}

// auditViews shows each publish audit's findings.
func auditViews(snap *Snapshot, collectorOK map[string]bool) []auditView {
	var out []auditView
	for _, o := range snap.Values(vocab.AuditChecked, vocab.LabelOutbox) {
		m := map[string]string{"outbox": o}
		av := auditView{Outbox: o, Status: OK}
		av.Missing = snap.Sum(vocab.AuditMissingInBroker, m)
		av.Unmarked = snap.Sum(vocab.AuditUnmarkedInBroker, m)
		av.Duplicates = snap.Sum(vocab.AuditDuplicates, m)
		av.Checked = snap.Sum(vocab.AuditChecked, m)
		switch {
		case !collectorOK["audit/"+o]:
			// A failed audit (an id-format mismatch withholds the
			// missing count) must not read as a clean one.
			av.Status = Unknown
		default:
			for _, f := range []struct {
				metric string
				n      float64
			}{{vocab.AuditMissingInBroker, av.Missing}, {vocab.AuditUnmarkedInBroker, av.Unmarked}, {vocab.AuditDuplicates, av.Duplicates}} {
				if f.n > 0 {
					av.Status = worst(av.Status, findingStatus(f.metric, ""))
				}
			}
		}
		out = append(out, av)
	}
	return out
}

// versionString is the exporter's version for a person, also for a build
// without version flags (tests, go run).
func versionString() string {
	v := version.Version
	if v == "" {
		v = "devel"
	}
	if r := version.GetRevision(); r != "" && r != "unknown" {
		v += " (" + r + ")"
	}
	return v
}

// outboxNames lists the outboxes the last collection reported on, with a
// deadline series or at least a collector result.
func outboxNames(snap *Snapshot) []string {
	names := snap.Values(vocab.OutboxDeadline, vocab.LabelOutbox)
	seen := map[string]bool{}
	for _, n := range names {
		seen[n] = true
	}
	for _, smp := range snap.Metrics[vocab.CollectorSuccess] {
		if smp.Labels["collector"] == "outbox" && !seen[smp.Labels["target"]] {
			seen[smp.Labels["target"]] = true
			names = append(names, smp.Labels["target"])
		}
	}
	sort.Strings(names)
	return names
}

// trimZero drops the zero field of a duration ending in unit+"0"+next
// ("3m0s" to "3m", "2h0m" to "2h").
func trimZero(s, suffix string) string {
	if strings.HasSuffix(s, suffix) {
		return strings.TrimSuffix(s, suffix[1:])
	}
	return s
}

// fmtSeconds renders a duration in seconds for a person: 42s, 3m10s, 2h5m.
func fmtSeconds(sec float64) string {
	if sec < 0 {
		sec = 0
	}
	d := time.Duration(sec * float64(time.Second)).Round(time.Second)
	switch {
	case d < time.Minute:
		return d.String()
	case d < time.Hour:
		// "3m0s" reads "3m"; "1m30s" stays.
		return trimZero(d.String(), "m0s")
	default:
		return trimZero(trimZero(d.Round(time.Minute).String(), "m0s"), "h0m")
	}
}

// sparkline draws a series as inline SVG with its deadline as a dashed
// red line. The output holds only numbers the function formats itself.
func sparkline(pts []history.Point, deadline float64) template.HTML {
	const w, h, pad = 180.0, 36.0, 2.0
	if len(pts) == 0 {
		return template.HTML(`<svg class="trend" width="180" height="36" role="img" aria-label="no history yet"><text x="4" y="22" font-size="10" fill="#888">no history yet</text></svg>`)
	}
	top := deadline * 1.25
	for _, p := range pts {
		if p.V > top {
			top = p.V * 1.05
		}
	}
	if top <= 0 {
		top = 1
	}
	t0, t1 := pts[0].T, pts[len(pts)-1].T
	span := t1.Sub(t0).Seconds()
	if span <= 0 {
		span = 1
	}
	y := func(v float64) float64 { return h - pad - (v/top)*(h-2*pad) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="trend" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img" aria-label="trend of the last hour against the deadline">`, w, h, w, h)
	if deadline > 0 {
		fmt.Fprintf(&b, `<line x1="0" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#c62828" stroke-dasharray="4 3" stroke-width="1"/>`, w, y(deadline), y(deadline))
	}
	b.WriteString(`<polyline fill="none" stroke="#1565c0" stroke-width="1.5" points="`)
	for i, p := range pts {
		x := pad + (p.T.Sub(t0).Seconds()/span)*(w-2*pad)
		if len(pts) == 1 {
			x = w - pad
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.1f,%.1f", x, y(p.V))
	}
	b.WriteString(`"/></svg>`)
	return template.HTML(b.String())
}
