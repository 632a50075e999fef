package audit

import (
	"context"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// oTally counts what the oracle's seeds exercised, so a run that judged
// nothing cannot pass.
type oTally struct {
	comparisons, missing, unmarked, dead, dups, malformed, shortened, flagged int
}

// oExpect is what the rules say one comparison must find.
type oExpect struct {
	span                    time.Duration
	missing, unmarked, dead []string
	dups                    map[string]int
	duplicatesTotal         uint64
	malformed, reread       uint64
	judged, matched         int
}

// oSeen is what the window holds for one sampled id.
type oSeen struct {
	earliest time.Time
	copies   int
}

// expect computes a comparison at time at by brute force: the window is
// every sampled id of the records the auditor could read (those retained
// at its start from one window back, and those written since) that is
// still inside the window; coverage is worked out from each partition's
// log start and first retained record; every row of the table is judged
// by the README's rules.
func (r *oracleRun) expect(o *oAuditor, at time.Time) oExpect {
	c := r.c
	var e oExpect
	win := r.windowOf(o, at, &e)
	start := at.Add(-c.window)
	if tf := r.coverageOf(o); tf.After(start) {
		start = tf
	}
	e.span = at.Sub(start)
	r.judgeRows(o, at, win, start.Add(c.grace), &e)
	for _, l := range [][]string{e.missing, e.unmarked, e.dead} {
		sort.Strings(l)
	}
	return e
}

// windowOf collects the window at time at and the record counters.
func (r *oracleRun) windowOf(o *oAuditor, at time.Time, e *oExpect) map[string]*oSeen {
	c := r.c
	from := o.start.Add(-c.window)
	win := map[string]*oSeen{}
	note := func(rec oRecord) {
		if rec.id == "" || rec.ts.Before(at.Add(-c.window)) || !r.sampledID(rec.id) {
			return
		}
		if s, ok := win[rec.id]; ok {
			s.copies++
			if rec.ts.Before(s.earliest) {
				s.earliest = rec.ts
			}
			return
		}
		win[rec.id] = &oSeen{earliest: rec.ts, copies: 1}
	}
	prior := map[string]bool{}
	for _, tp := range sortedParts(o.snap) {
		for _, rec := range o.snap[tp].recs {
			if rec.ts.Before(from) {
				continue
			}
			if rec.id == "" {
				if rec.ts.Before(o.start) {
					e.reread++
				}
				continue
			}
			note(rec)
			if r.sampledID(rec.id) {
				prior[rec.id] = true
			}
		}
	}
	liveCopies := map[string]int{}
	for _, rec := range o.live {
		if rec.id == "" {
			e.malformed++
			continue
		}
		note(rec)
		if r.sampledID(rec.id) {
			liveCopies[rec.id]++
		}
	}
	// Each live copy is a duplicate but the first of an id the window did
	// not hold yet.
	for id, n := range liveCopies {
		e.duplicatesTotal += uint64(n)
		if !prior[id] {
			e.duplicatesTotal--
		}
	}
	e.dups = map[string]int{}
	for id, s := range win {
		if s.copies > 1 {
			e.dups[id] = s.copies
		}
	}
	return win
}

// coverageOf is where the auditor's view of the topics begins: per
// partition one window back, or, where the log start is past 0 and no
// retained record is older than that, the first retained record (the
// start if none is retained); the latest over all partitions.
func (r *oracleRun) coverageOf(o *oAuditor) time.Time {
	from := o.start.Add(-r.c.window)
	latest := from
	for _, p := range o.snap {
		cover := from
		if r.compacted && r.c.source != "key" {
			// Compaction may have removed any record older than
			// min.compaction.lag.ms (0: kfake has none) before the start;
			// with the id in the key the newest record of each survives.
			cover = o.start
		}
		// Deleted records may have been in the window when no retained
		// record is older than it; on a compacted topic whenever anything
		// was deleted (compaction leaves gaps). Then the partition counts
		// from its first retained record inside the window (the start if
		// none).
		if p.logStart > 0 && (len(p.recs) == 0 || !p.recs[0].ts.Before(from) || r.compacted) {
			first := o.start
			for _, rec := range p.recs {
				if !rec.ts.Before(from) {
					first = rec.ts
					break
				}
			}
			if first.After(cover) {
				cover = first
			}
		}
		if cover.After(latest) {
			latest = cover
		}
	}
	return latest
}

// judgeRows judges every row in scope against the window.
func (r *oracleRun) judgeRows(o *oAuditor, at time.Time, win map[string]*oSeen, judgeFrom time.Time, e *oExpect) {
	c := r.c
	firstSeen := map[string]time.Time{}
	for _, row := range c.rows {
		if row.deleted || !r.sampledID(row.id) || !r.inScope(row, judgeFrom) {
			continue
		}
		if j := row.created.Add(c.grace); j.After(o.checkedUpTo) && !j.After(at) {
			o.checked++
		}
		s, onTopic := win[row.id]
		switch row.class {
		case Published:
			marked := at
			if row.published != nil {
				marked = *row.published
			} else {
				if t, ok := o.firstSeen[row.id]; ok {
					marked = t
				}
				if !onTopic {
					firstSeen[row.id] = marked
				}
			}
			if at.Sub(marked) < c.grace {
				continue
			}
			e.judged++
			if onTopic {
				e.matched++
			} else {
				e.missing = append(e.missing, row.id)
			}
		case Unpublished:
			if !onTopic {
				continue
			}
			w := c.width.Milliseconds()
			end := time.UnixMilli((s.earliest.UnixMilli()/w + 1) * w)
			if at.Sub(end) >= c.grace {
				e.unmarked = append(e.unmarked, row.id)
			}
		case Dead:
			if onTopic {
				e.dead = append(e.dead, row.id)
			}
		}
	}
	o.firstSeen = firstSeen
	o.checkedUpTo = at
}

// inScope: published rows by publication time (created_at without a
// published_at column); unpublished rows a relay claimed (an in_flight or
// unknown status, a lease) whatever their age, and the others created
// inside the window; dead rows by dead_at (or created_at); no row of an
// unlisted status.
func (r *oracleRun) inScope(row *oRow, from time.Time) bool {
	switch row.class {
	case Published:
		if r.ob.PublishedAt != "" {
			return row.published != nil && !row.published.Before(from)
		}
		return !row.created.Before(from)
	case Unpublished:
		claimed := row.lease != nil
		if row.status != nil {
			switch *row.status {
			case "CLAIMED", "UNKNOWN", "1", "4":
				claimed = true
			}
		}
		return claimed || !row.created.Before(from)
	case Dead:
		if row.dead != nil {
			return !row.dead.Before(from)
		}
		return !row.created.Before(from)
	}
	return false
}

// check compares the auditor at time at with the oracle. Right after a
// start (settled false) a lost acknowledgement may be judged one bucket
// late (window.add keeps a late-read record in the oldest open bucket), so
// then the unmarked list need only be a subset of the oracle's.
func (r *oracleRun) check(o *oAuditor, at time.Time, settled bool) {
	t := r.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := o.a.Compare(ctx); err != nil {
		t.Fatalf("%v: compare at %v: %v", r.c, at, err)
	}
	e := r.expect(o, at)
	rep, st := o.a.Report(), o.a.Stats()
	if r.tally != nil {
		r.tally.comparisons++
		r.tally.missing += len(e.missing)
		r.tally.unmarked += len(e.unmarked)
		r.tally.dead += len(e.dead)
		r.tally.dups += int(e.duplicatesTotal)
		r.tally.malformed += int(e.malformed + e.reread)
		if e.span < r.c.window {
			r.tally.shortened++
		}
		if rep.IDMismatch != "" {
			r.tally.flagged++
		}
	}
	where := func(what string) string {
		return r.c.String() + ", comparison at +" + at.Sub(r.c.base).String() + ": " + what
	}
	eq := func(what string, got, want any) {
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v, oracle %v", where(what), got, want)
		}
	}
	eq("missing_in_broker", ids(rep.Missing), nonNil(e.missing))
	eq("dead_in_broker", ids(rep.Dead), nonNil(e.dead))
	if settled {
		eq("unmarked_in_broker", ids(rep.Unmarked), nonNil(e.unmarked))
	} else if extra := minus(ids(rep.Unmarked), e.unmarked); len(extra) > 0 {
		t.Errorf("%s: %v, not in the oracle's %v", where("unmarked_in_broker right after start"), extra, e.unmarked)
	}
	eq("duplicates", dupIDs(rep.Duplicates), e.dups)
	eq("window", time.Duration(rep.WindowSeconds*float64(time.Second)), e.span)
	eq("re-read malformed", rep.RereadMalformed, e.reread)
	eq("published judged", rep.Match.Judged, e.judged)
	eq("published found", rep.Match.Matched, e.matched)
	flagged := rep.IDMismatch != ""
	eq("id mismatch flagged", flagged, implausible(rep.Match))
	if r.c.mismatch {
		eq("recent topic ids found as rows in a mismatch seed", rep.Match.Found, 0)
	}
	if r.c.mismatch && e.judged >= minJudged && rep.Match.Recent >= minRecent && !flagged {
		t.Errorf("%s", where("a mismatch seed not flagged"))
	}
	if !r.c.mismatch && flagged {
		t.Errorf("%s: %s", where("flagged a mismatch in a seed without one"), rep.IDMismatch)
	}
	eq("stats duplicates", st.Duplicates, e.duplicatesTotal)
	eq("stats malformed", st.Malformed, e.malformed)
	eq("stats checked", st.Checked, o.checked)

	// Every series, as exported.
	series := r.gather(o.a)
	want := map[string]float64{
		"outbox_audit_unmarked_in_broker_events": float64(rep.UnmarkedCount),
		"outbox_audit_dead_in_broker_events":     float64(len(e.dead)),
		"outbox_audit_window_seconds":            e.span.Seconds(),
		"outbox_audit_duplicates_total":          float64(e.duplicatesTotal),
		"outbox_audit_checked_events_total":      float64(o.checked),
		"outbox_audit_malformed_records_total":   float64(e.malformed),
	}
	if !flagged {
		want["outbox_audit_missing_in_broker_events"] = float64(len(e.missing))
	}
	if settled {
		want["outbox_audit_unmarked_in_broker_events"] = float64(len(e.unmarked))
	}
	eq("series", series, want)
	if strings.Contains(strings.Join(ids(rep.Missing), ","), secretBody) {
		t.Error("a body in the report")
	}
}

func (r *oracleRun) gather(a *Auditor) map[string]float64 {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(auditAdapter{NewCollector(a)}); err != nil {
		r.t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out[mf.GetName()] = value(mf.GetType(), m)
		}
	}
	return out
}

func value(t dto.MetricType, m *dto.Metric) float64 {
	if t == dto.MetricType_COUNTER {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func minus(a, b []string) []string {
	in := map[string]bool{}
	for _, x := range b {
		in[x] = true
	}
	var out []string
	for _, x := range a {
		if !in[x] {
			out = append(out, x)
		}
	}
	return out
}
