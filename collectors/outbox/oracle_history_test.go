package outbox

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// The history half of the oracle's generator: what writers and relays do
// to a generated table between two samples, drawn from the seed, and the
// writes that bring the server's table to the generator's rows.

// jitter is a random sub-second offset, so that no two generated times
// tie with a sample's time.
func jitter(r *rand.Rand) time.Duration { return time.Duration(1+r.IntN(999_999)) * time.Microsecond }

// unpublishedRow reports whether the row can still change: the generator
// only acts on rows not yet published, dead or unclassified.
func (g *genTable) unpublishedRow(w *genRow) bool {
	switch {
	case w.deleted:
		return false
	case g.style == config.StyleStatus:
		return w.status != nil && (*w.status == g.st.pending || *w.status == g.st.claimed ||
			*w.status == g.st.maybe || *w.status == g.st.retry)
	default:
		return w.published == nil && w.dead == nil
	}
}

// insert adds a row created around at.
func (g *genTable) insert(r *rand.Rand, at time.Time, backlog bool) {
	w := &genRow{id: g.nextID, dirty: true, inserted: true}
	g.nextID++
	age := time.Duration(r.IntN(600)) * time.Second
	if backlog {
		age = time.Duration(r.IntN(3600)) * time.Second
	}
	switch x := r.IntN(40); {
	case x == 0:
		// A legacy row without created_at.
	case x == 1:
		w.created = tp(at.Add(5*time.Second + jitter(r))) // a writer's clock ahead
	default:
		w.created = tp(at.Add(-age - jitter(r)))
	}
	for i := range g.o.Labels {
		if g.nullable && r.IntN(12) == 0 {
			w.labels = append(w.labels, nil)
			continue
		}
		w.labels = append(w.labels, sp(g.pick(r, g.pools[i])))
	}
	if g.style == config.StyleStatus {
		w.status = sp(g.st.pending)
	}
	w.hidden = g.o.Filter != "" && r.IntN(8) == 0
	g.rows[w.id] = w
}

// claimRow gives w a new lease taken at at.
func (g *genTable) claimRow(w *genRow, at time.Time) {
	if w.lease != nil {
		w.lease.ended, w.lease.endKind = tp(at), "reclaimed"
	}
	l := &genLease{id: w.id, start: at, expiry: at.Add(g.tau)}
	l.value = at
	if g.o.LeaseUntil != "" {
		l.value = at.Add(g.tau)
	}
	w.lease = l
	w.claim = tp(l.value)
	g.leases = append(g.leases, l)
	if g.style == config.StyleStatus && len(g.o.InFlight) > 0 && (w.status == nil || *w.status != g.st.maybe) {
		w.status = sp(g.st.claimed)
	}
	if g.o.Attempts != "" {
		w.attempts++
	}
	w.dirty = true
}

func (g *genTable) endLease(w *genRow, at time.Time, kind string) {
	if w.lease != nil {
		w.lease.ended, w.lease.endKind = tp(at), kind
		w.lease = nil
	}
}

// step applies n random events at times in (from, to].
func (g *genTable) step(r *rand.Rand, from, to time.Time, n int) {
	span := to.Sub(from)
	times := make([]time.Time, n)
	for i := range times {
		times[i] = from.Add(time.Duration(r.Int64N(int64(span))) + time.Microsecond)
	}
	sortTimes(times)
	for _, at := range times {
		g.event(r, at)
	}
}

func sortTimes(ts []time.Time) {
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && ts[j].Before(ts[j-1]); j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

// live returns the rows that can still change, in id order.
func (g *genTable) live() []*genRow {
	var out []*genRow
	for id := int64(1); id < g.nextID; id++ {
		if w := g.rows[id]; w != nil && !w.deleted && g.unpublishedRow(w) {
			out = append(out, w)
		}
	}
	return out
}

func (g *genTable) event(r *rand.Rand, at time.Time) {
	o := g.o
	live := g.live()
	x := r.IntN(100)
	if len(live) == 0 || x < 22 {
		g.insert(r, at, false)
		return
	}
	w := live[r.IntN(len(live))]
	canClaim := (o.ClaimedAt != "" || o.LeaseUntil != "") || (g.style == config.StyleStatus && len(o.InFlight) > 0)
	switch {
	case x < 40 && canClaim && (w.lease == nil || !at.Before(w.lease.expiry)):
		// A relay claims a pending row, or reclaims one whose lease ran
		// out (its holder died).
		g.claimRow(w, at)
	case x < 62:
		g.publish(r, w, at)
	case x < 68 && w.lease != nil:
		// The holder gives the row back after a failed attempt.
		g.endLease(w, at, "released")
		w.claim = nil
		if w.status != nil {
			w.status = sp(g.st.pending)
		}
		w.dirty = true
	case x < 72 && (o.DeadAt != "" || len(o.Dead) > 0):
		g.endLease(w, at, "dead")
		if g.style == config.StyleStatus {
			w.status = sp(g.st.dead)
		} else {
			w.dead = tp(at)
		}
		w.dirty = true
	case x < 75 && g.style == config.StyleStatus:
		// A legacy row or a value a library upgrade added.
		g.endLease(w, at, "unclassified")
		if r.IntN(2) == 0 {
			w.status = nil
		} else {
			w.status = sp(g.st.weird)
		}
		w.dirty = true
	case x < 80 && g.style == config.StyleStatus && slices.Contains(o.Unknown, g.st.maybe):
		if w.lease != nil {
			w.status = sp(g.st.maybe)
		} else if slices.Contains(o.Unknown, g.st.retry) {
			w.status = sp(g.st.retry)
		}
		w.dirty = true
	case x < 84:
		w.flag = !w.flag
		w.dirty = true
	case x < 88:
		// A burst: a backlog that passes a small max_count.
		for i := 0; i < 5+r.IntN(30); i++ {
			g.insert(r, at, true)
		}
	default:
		g.insert(r, at, false)
	}
}

// publish marks w published at at (its holder may publish after its lease
// ran out); published_at may trail the commit by up to 20 s.
func (g *genTable) publish(r *rand.Rand, w *genRow, at time.Time) {
	g.endLease(w, at, "published")
	if g.style == config.StyleDeleteOnPublish {
		w.deleted, w.dirty = true, true
		return
	}
	if g.style == config.StyleStatus {
		w.status = sp(g.st.published)
	}
	pub := at
	if r.IntN(4) == 0 {
		pub = at.Add(-time.Duration(r.IntN(20_000_000)) * time.Microsecond)
	}
	if g.o.PublishedAt != "" || g.style == config.StyleTimestamps {
		w.published = tp(pub)
	}
	w.dirty = true
}

// wall writes a time as the table's timestamp columns hold it.
func (g *genTable) wall(t *time.Time) any {
	if t == nil {
		return nil
	}
	if g.tsType == "timestamp" {
		return t.In(g.zone).Format("2006-01-02 15:04:05.999999")
	}
	return t.UTC().Format("2006-01-02 15:04:05.999999") + "+00"
}

// writes are the statements that bring the table to the model.
func (g *genTable) writes() []genWrite {
	var out []genWrite
	for id := int64(1); id < g.nextID; id++ {
		w := g.rows[id]
		if w == nil || !w.dirty {
			continue
		}
		w.dirty = false
		if w.deleted {
			if !w.inserted {
				out = append(out, genWrite{"DELETE FROM public." + g.name + " WHERE id = $1", []any{w.id}})
			}
			delete(g.rows, id)
			continue
		}
		var lease, claimed *time.Time
		switch {
		case g.o.LeaseUntil != "":
			lease = w.claim
		case g.o.ClaimedAt != "":
			claimed = w.claim
		}
		var status any
		if w.status != nil {
			status = *w.status
		}
		args := []any{w.id, g.wall(w.created), status, g.wall(w.published), g.wall(w.dead), g.wall(lease), g.wall(claimed),
			w.attempts, w.flag, w.hidden}
		cols := "id, created_at, status, published_at, dead_at, lease_until, claimed_at, attempts, flag, hidden"
		for i, l := range w.labels {
			cols += fmt.Sprintf(", l%d", i)
			if l == nil {
				args = append(args, nil)
			} else {
				args = append(args, *l)
			}
		}
		ph := make([]string, len(args))
		for i := range ph {
			ph[i] = "$" + strconv.Itoa(i+1)
		}
		if w.inserted {
			w.inserted = false
			out = append(out, genWrite{fmt.Sprintf("INSERT INTO public.%s (%s) VALUES (%s)", g.name, cols, strings.Join(ph, ", ")), args})
			continue
		}
		var set []string
		for i, c := range strings.Split(cols, ", ")[1:] {
			set = append(set, c+" = $"+strconv.Itoa(i+2))
		}
		out = append(out, genWrite{fmt.Sprintf("UPDATE public.%s SET %s WHERE id = $1", g.name, strings.Join(set, ", ")), args})
	}
	return out
}

type genWrite struct {
	sql  string
	args []any
}
