package reconcile

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// candidate is a key the merge classified as a gap, before the re-check.
type candidate struct {
	k     key
	kinds []Kind
}

// compare merges one range's sides, re-checks what looks like a gap, and
// records what the re-check confirms.
func (r *runner) compare(ctx context.Context, as []aRow, ts []tRow) error {
	if r.sortKeys {
		slices.SortStableFunc(as, func(x, y aRow) int { return compareKeys(x.k, y.k) })
		slices.SortStableFunc(ts, func(x, y tRow) int { return compareKeys(x.k, y.k) })
	}
	r.res.RowsRead += int64(len(as) + len(ts))
	cands := r.merge(as, ts)
	for len(cands) > 0 {
		n := min(len(cands), recheckBatch)
		if err := r.recheck(ctx, cands[:n], false); err != nil {
			return err
		}
		cands = cands[n:]
	}
	return nil
}

// observe builds the observation of one key from what each side holds.
func (r *runner) observe(a *aRow, t *tRow) Observation {
	o := Observation{HasTarget: r.p.target != nil, DeleteOnPublish: r.p.deleteOnPublish}
	if a != nil {
		o.InAuthority, o.Version, o.VersionNull, o.Judged = true, a.v.n, a.v.null, a.judged
		o.Outbox, o.OutboxJudged = a.outbox, a.pub != pubYoung
	}
	if t != nil {
		o.InTarget, o.TargetVersion, o.TargetVersionNull, o.TargetRows = true, t.v.n, t.v.null, t.n
	}
	return o
}

// merge walks both sorted sides of a range and returns the keys that
// look like gaps; it counts the judged authority rows.
func (r *runner) merge(as []aRow, ts []tRow) []candidate {
	var out []candidate
	i, j := 0, 0
	for i < len(as) || j < len(ts) {
		var a *aRow
		var t *tRow
		c := 0
		switch {
		case j >= len(ts):
			c = -1
		case i >= len(as):
			c = 1
		default:
			c = compareKeys(as[i].k, ts[j].k)
		}
		if c <= 0 {
			a = &as[i]
			i++
			if a.judged {
				r.res.RowsChecked++
			}
		}
		if c >= 0 {
			t = &ts[j]
			j++
		}
		k := key{}
		if a != nil {
			k = a.k
		} else {
			k = t.k
		}
		if kinds := Classify(r.observe(a, t)); len(kinds) > 0 {
			out = append(out, candidate{k: k, kinds: kinds})
		}
	}
	return out
}

// recheck reads the candidates again, each side by point look-up, and
// records the gaps that still hold, or holds those no column dates for
// confirmation after grace (confirm.go); final (the confirmation itself)
// records them. Ranges are read in separate snapshots, so a row committed
// during the run can look like a gap; reading again in pipeline order
// decides. The target is read first for orphans (any authority row that
// produced it is committed by the time the authority is read after it),
// and read last for the other kinds (any target row for the authority's
// version is then visible).
func (r *runner) recheck(ctx context.Context, cands []candidate, final bool) error {
	r.res.Rechecked += int64(len(cands))
	var t1, t2 map[key]tRow
	var err error
	if r.p.target != nil {
		if t1, err = r.lookupTarget(ctx, cands); err != nil {
			return err
		}
	}
	as, err := r.lookupAuthority(ctx, cands)
	if err != nil {
		return err
	}
	if r.p.target != nil {
		if t2, err = r.lookupTarget(ctx, cands); err != nil {
			return err
		}
	}
	for _, c := range cands {
		var a *aRow
		if row, ok := as[c.k]; ok {
			a = &row
		}
		before := r.observe(a, lookup(t1, c.k))
		after := r.observe(a, lookup(t2, c.k))
		for _, kind := range c.kinds {
			obs := after
			if kind == OrphanTarget {
				obs = before
			}
			if !slices.Contains(Classify(obs), kind) {
				continue
			}
			if !final && r.undated(kind, obs, a) {
				r.hold(c.k, kind, obs)
				continue
			}
			r.record(c.k, kind, obs)
		}
	}
	return nil
}

// undated reports whether no column dates the moment the pipeline could
// first have removed this gap, so that grace cannot be measured from it:
// an orphan whose authority row is gone (a deletion leaves no row to date
// it), a target gap of an event whose publication is not dated (no
// published_at, or a delete-on-publish outbox), and without an outbox a
// stale target where the authority does not date its updates.
func (r *runner) undated(kind Kind, o Observation, a *aRow) bool {
	switch kind {
	case OrphanTarget:
		return !o.InAuthority
	case MissingTarget, StaleTarget:
		if r.p.hasOutbox {
			// pubUndated: no published_at column, a row a delete-on-publish
			// relay removed, or a published row whose published_at is NULL.
			return a == nil || a.pub == pubUndated
		}
		return kind == StaleTarget && r.p.aUpdated == ""
	}
	return false
}

func lookup(m map[key]tRow, k key) *tRow {
	if t, ok := m[k]; ok {
		return &t
	}
	return nil
}

// keyArgs are the candidates' keys as an array argument for a column of
// type to; keys that no value of to can equal are left out.
func (r *runner) keyArgs(cands []candidate, to keyType) any {
	if r.kt == keyInt {
		ks := make([]int64, len(cands))
		for i, c := range cands {
			ks[i] = c.k.i
		}
		return ks
	}
	ks := make([]string, 0, len(cands))
	for _, c := range cands {
		if v, ok := c.k.argFor(keyText, to); ok {
			ks = append(ks, v.(string))
		}
	}
	return ks
}

func (r *runner) lookupAuthority(ctx context.Context, cands []candidate) (map[key]aRow, error) {
	q, args := r.p.authorityLookup(r.w, r.keyArgs(cands, r.kt))
	list, err := r.queryAuthority(ctx, false, q, args, nil)
	if err != nil {
		return nil, fmt.Errorf("re-check authority rows: %w", err)
	}
	m := make(map[key]aRow, len(list))
	for _, a := range list {
		if prev, ok := m[a.k]; ok && rank(prev.outbox) >= rank(a.outbox) {
			continue
		}
		m[a.k] = a
	}
	return m, nil
}

func (r *runner) lookupTarget(ctx context.Context, cands []candidate) (map[key]tRow, error) {
	q, args := r.p.targetLookup(r.keyArgs(cands, r.tt))
	var list []tRow
	err := query(ctx, r.p.target, false, q, args, func(rows pgx.Rows) error {
		var err error
		list, err = r.scanTarget(rows, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("re-check target rows: %w", err)
	}
	m := make(map[key]tRow, len(list))
	for _, t := range list {
		if prev, ok := m[t.k]; ok {
			t = appendTarget([]tRow{prev}, t)[0]
		}
		m[t.k] = t
	}
	return m, nil
}

// record counts a confirmed gap and keeps its finding while under the cap.
func (r *runner) record(k key, kind Kind, o Observation) {
	r.res.Gaps[kind]++
	r.keep(k, kind, o, false)
}

// keep lists a gap among the findings, up to max_findings of each kind.
func (r *runner) keep(k key, kind Kind, o Observation, unconfirmed bool) {
	if r.res.kept[kind] >= r.max {
		r.res.Truncated = true
		return
	}
	r.res.kept[kind]++
	kt := r.kt
	if !o.InAuthority {
		kt = r.tt
	}
	f := Finding{Key: k.render(kt), Kind: kind, OutboxState: o.Outbox.String(), Unconfirmed: unconfirmed}
	if o.InAuthority {
		f.AuthorityVersion, f.AuthorityVersionNull = reported(o.Version, o.VersionNull)
	}
	if o.InTarget {
		f.TargetVersion, f.TargetVersionNull = reported(o.TargetVersion, o.TargetVersionNull)
		if o.TargetRows > 1 {
			f.TargetRows = o.TargetRows
		}
	}
	r.res.Findings = append(r.res.Findings, f)
}

// reported is a version as a finding shows it: a pointer to its value, or
// a NULL flag.
func reported(v int64, null bool) (*int64, bool) {
	if null {
		return nil, true
	}
	return &v, false
}
