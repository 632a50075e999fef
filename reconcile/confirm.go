package reconcile

import (
	"context"
	"time"
)

// A gap whose cause no column dates (a target row whose authority row was
// deleted, a target gap of an event whose publication time is unknown)
// may be the pipeline still at work: the deletion's event not yet
// applied, the consumer lagging. Grace cannot be measured from a column,
// so it is measured from the gap's first sighting: such a finding is
// reported only if it persists across runs at least grace apart. The
// Scheduler keeps each job's held findings from run to run; a run that
// sees one again grace or more after its first sighting reports it, and a
// full sweep that no longer sees one forgets it. A one-off run (the
// reconcile command, ConfirmInRun) has no next run: it holds its findings
// to its end, waits until grace has passed since each was seen, and reads
// them again by point look-up. Every other finding is dated (created_at,
// updated_at, published_at) and judged at once.

// HoldNotice says that a one-off run holds findings no column dates: how
// many, and when the last of them will have been read again (by the run's
// clock).
type HoldNotice struct {
	Job      string
	Findings int
	Grace    time.Duration
	Until    time.Time
}

// inRunRules are the choices of a one-off run (ConfirmInRun) about the
// findings it would hold: report them at once, unconfirmed, or hold them
// and say so through onHold.
type inRunRules struct {
	atOnce bool
	onHold func(HoldNotice)
}

// heldID names a held finding.
type heldID struct {
	k    key
	kind Kind
}

// pendingFinding is one held finding and when it was first seen.
type pendingFinding struct {
	k    key
	kind Kind
	seen time.Time
}

// now is the run's clock: the wall clock (or HeldClock's), advanced by
// skipped waits.
func (r *runner) now() time.Time {
	if r.clock != nil {
		return r.clock().Add(r.skew)
	}
	return time.Now().Add(r.skew)
}

// hold keeps a finding no column dates until it has persisted for grace,
// or records it if an earlier run saw it grace or more ago.
func (r *runner) hold(k key, kind Kind, o Observation) {
	now := r.now()
	if r.confirmInRun && r.inRun.atOnce {
		r.res.ReportedUnconfirmed++
		r.keep(k, kind, o, true)
		return
	}
	if r.confirmInRun {
		if len(r.pending) >= maxPending {
			r.res.Unconfirmed++
			return
		}
		r.pending = append(r.pending, pendingFinding{k: k, kind: kind, seen: now})
		return
	}
	id := heldID{k, kind}
	first, seen := r.prior[id]
	if !seen {
		first = now
	}
	confirmed := seen && now.Sub(first) >= r.p.job.Grace
	if confirmed {
		r.record(k, kind, o)
	}
	// A reported finding stays held with its first sighting, so that the
	// next run reports it again at once rather than seeing it anew.
	if len(r.held) >= maxPending {
		if !confirmed {
			r.res.Unconfirmed++
		}
		return
	}
	if r.held == nil {
		r.held = map[heldID]time.Time{}
	}
	r.held[id] = first
	if !confirmed {
		r.res.Held++
	}
}

// nextHeld is what the job holds after a completed run: what this run
// held, and, unless it swept every key, what earlier runs held that it
// did not look at again, up to maxPending.
func (r *runner) nextHeld() map[heldID]time.Time {
	next := r.held
	if next == nil {
		next = map[heldID]time.Time{}
	}
	if r.w.full {
		return next
	}
	for id, t := range r.prior {
		if _, ok := next[id]; !ok && len(next) < maxPending {
			next[id] = t
		}
	}
	return next
}

// wait returns once d has passed, or ctx ended.
func (r *runner) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if r.hooks.skipWaits {
		r.skew += d
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// confirmPending reads the held findings again, in the order they were
// seen, each once grace has passed since, and records those that still
// hold.
func (r *runner) confirmPending(ctx context.Context) error {
	pend := r.pending
	r.pending = nil
	hooked := false
	if len(pend) > 0 && r.logger != nil {
		r.logger.Info("reconcile run holds findings no column dates until grace has passed since they were seen",
			"reconcile", r.p.name, "findings", len(pend), "grace", r.p.job.Grace)
	}
	if len(pend) > 0 && r.inRun.onHold != nil {
		r.inRun.onHold(HoldNotice{Job: r.p.name, Findings: len(pend), Grace: r.p.job.Grace,
			Until: pend[len(pend)-1].seen.Add(r.p.job.Grace)})
	}
	for len(pend) > 0 {
		if err := r.wait(ctx, pend[0].seen.Add(r.p.job.Grace).Sub(r.now())); err != nil {
			return err
		}
		if !hooked && r.hooks.beforeConfirm != nil {
			r.hooks.beforeConfirm()
		}
		hooked = true
		now := r.now()
		n := 0
		for n < len(pend) && n < recheckBatch && !pend[n].seen.Add(r.p.job.Grace).After(now) {
			n++
		}
		n = max(n, 1)
		cands := make([]candidate, n)
		for i, p := range pend[:n] {
			cands[i] = candidate{k: p.k, kinds: []Kind{p.kind}}
		}
		if err := r.recheck(ctx, cands, true); err != nil {
			return err
		}
		pend = pend[n:]
	}
	return nil
}
