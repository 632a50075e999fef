package outbox

// The generator of the oracle test: a seeded, repeatable outbox table (its
// configuration, column types and rows) and a history of what writers and
// relays do to it between samples. Everything is decided by the seed, so a
// failing seed replays exactly.

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// genStatuses are the status values of a generated status-style outbox:
// the text form, or the integer form.
type genStatuses struct {
	pending, claimed, published, dead, maybe, retry, weird string
}

var (
	textStatuses = genStatuses{"PENDING", "CLAIMED", "PUBLISHED", "ABANDONED", "MAYBE", "RETRY", "WEIRD"}
	intStatuses  = genStatuses{"0", "1", "2", "3", "4", "5", "9"}
)

// genTable is one generated outbox: its configuration and what the
// generator knows of it.
type genTable struct {
	seed  uint64
	name  string // table name
	o     *config.Outbox
	st    genStatuses
	style config.StateStyle
	// tsType is the type of the timestamp columns; zone the zone their
	// wall clock is written in (time_zone, else UTC, the session's).
	tsType string
	zone   *time.Location
	// tau is the relays' lease length.
	tau time.Duration
	// pools are the values of each label column.
	pools    [][]string
	nullable bool
	rows     map[int64]*genRow
	nextID   int64
	leases   []*genLease
}

// genRow is the generator's model of one row, as it is in the table.
type genRow struct {
	id        int64
	created   *time.Time
	labels    []*string
	status    *string
	published *time.Time
	dead      *time.Time
	claim     *time.Time // the claim column: lease_until or claimed_at
	attempts  int
	flag      bool
	hidden    bool
	deleted   bool
	dirty     bool
	inserted  bool
	lease     *genLease // the lease it holds, if claimed
}

// genLease is one lease a relay took, with how it truly ended.
type genLease struct {
	id      int64
	value   time.Time // the claim column's value
	start   time.Time
	expiry  time.Time
	ended   *time.Time
	endKind string // "published", "reclaimed", "released", "dead", ...
}

func (g *genTable) pick(r *rand.Rand, list []string) string { return list[r.IntN(len(list))] }

// newGenTable draws an outbox configuration and table from the seed. The
// draws are made in a fixed order (style, clock, labels, states, claims,
// filter): a seed must keep drawing the same table.
func newGenTable(seed uint64) *genTable {
	r := rand.New(rand.NewPCG(seed, 0x0b0c5))
	g := &genTable{seed: seed, name: fmt.Sprintf("ox_%d", seed), rows: map[int64]*genRow{}, nextID: 1}
	o := &config.Outbox{Database: "main", Table: "public." + g.name, ID: "id", CreatedAt: "created_at",
		Deadline: time.Duration(30+r.IntN(300)) * time.Second, SLOObjective: 0.999}
	g.o = o
	g.drawStyle(r)
	g.drawClock(r)
	g.drawLabels(r)
	o.MaxCount = 100000
	if r.IntN(3) == 0 {
		o.MaxCount = 3 + r.IntN(20)
	}
	g.drawStates(r)
	g.drawClaims(r)
	if r.IntN(4) == 0 {
		o.Filter = "NOT hidden"
	}
	return g
}

// drawStyle draws the state style and, for a status style, the form of
// its values.
func (g *genTable) drawStyle(r *rand.Rand) {
	switch r.IntN(5) {
	case 0, 1:
		g.style = config.StyleStatus
		g.st = textStatuses
	case 2:
		g.style = config.StyleStatus
		g.st = intStatuses
	case 3:
		g.style = config.StyleTimestamps
	default:
		g.style = config.StyleDeleteOnPublish
	}
}

// drawClock draws the timestamp columns' type and the zone their wall
// clock is written in.
func (g *genTable) drawClock(r *rand.Rand) {
	g.tsType = "timestamptz"
	g.zone = time.UTC
	if r.IntN(3) == 0 {
		g.tsType = "timestamp"
		if r.IntN(2) == 0 {
			g.o.TimeZone = "Asia/Tokyo"
			g.zone, _ = time.LoadLocation("Asia/Tokyo")
		}
	}
}

// drawLabels draws the label columns, whether they hold NULLs, their
// values, the cap on label values and the per-label deadlines.
func (g *genTable) drawLabels(r *rand.Rand) {
	o := g.o
	nl := r.IntN(4)
	g.nullable = r.IntN(3) == 0
	names := []string{"event_type", "destination", "tenant"}
	for i := 0; i < nl; i++ {
		o.Labels = append(o.Labels, config.Label{Name: names[i], Column: "l" + strconv.Itoa(i)})
		n := 1 + r.IntN(6)
		var pool []string
		for j := 0; j < n; j++ {
			pool = append(pool, fmt.Sprintf("%c%d", 'a'+rune(i), j))
		}
		g.pools = append(g.pools, pool)
	}
	o.MaxLabelValues = 100
	if nl > 0 && r.IntN(2) == 0 {
		o.MaxLabelValues = 1 + r.IntN(4)
	}
	if nl > 0 && r.IntN(2) == 0 {
		o.Deadlines = map[string]time.Duration{}
		for _, v := range g.pools[0] {
			if r.IntN(3) == 0 {
				o.Deadlines[v] = time.Duration(5+r.IntN(120)) * time.Second
			}
		}
		if r.IntN(4) == 0 {
			o.Deadlines[Other] = time.Duration(10+r.IntN(60)) * time.Second
		}
	}
}

// drawStates draws the columns and values that tell the states apart,
// as the style allows.
func (g *genTable) drawStates(r *rand.Rand) {
	o := g.o
	if g.style == config.StyleStatus {
		o.Status = "status"
		o.Pending = []string{g.st.pending}
		if r.IntN(4) != 0 {
			o.InFlight = []string{g.st.claimed}
		}
		o.Published = []string{g.st.published}
		if r.IntN(3) != 0 {
			o.Dead = []string{g.st.dead}
		}
		if r.IntN(2) == 0 {
			o.Unknown = []string{g.st.maybe}
			if r.IntN(2) == 0 {
				o.Pending = append(o.Pending, g.st.retry)
				o.Unknown = append(o.Unknown, g.st.retry)
			}
		}
		if r.IntN(2) == 0 {
			o.PublishedAt = "published_at"
		}
	}
	if g.style == config.StyleTimestamps {
		o.PublishedAt = "published_at"
		if r.IntN(2) == 0 {
			o.DeadAt = "dead_at"
		}
	}
}

// drawClaims draws the relays' lease length, the claim column, attempts
// and unknown_when.
func (g *genTable) drawClaims(r *rand.Rand) {
	o := g.o
	g.tau = time.Duration(10+r.IntN(50)) * time.Second
	switch r.IntN(4) {
	case 0:
		o.LeaseUntil = "lease_until"
	case 1:
		o.ClaimedAt, o.LeaseTTL = "claimed_at", g.tau
	case 2:
		if g.style != config.StyleStatus || len(o.InFlight) == 0 {
			// Claimed without a lease to judge.
			o.ClaimedAt = "claimed_at"
		} else {
			o.LeaseUntil = "lease_until"
		}
	}
	if r.IntN(3) != 0 {
		o.Attempts = "attempts"
	}
	if r.IntN(4) == 0 {
		o.UnknownWhen = "flag"
	}
}

// schema is the CREATE TABLE of the generated outbox.
func (g *genTable) schema() string {
	statusType := "text"
	if g.st == intStatuses {
		statusType = "int2"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE public.%s (id bigint PRIMARY KEY, created_at %s", g.name, g.tsType)
	for i := range g.o.Labels {
		fmt.Fprintf(&b, ", l%d text", i)
		if !g.nullable {
			b.WriteString(" NOT NULL")
		}
	}
	fmt.Fprintf(&b, ", status %s, published_at %s, dead_at %s, lease_until %s, claimed_at %s, attempts int NOT NULL DEFAULT 0,"+
		" flag boolean NOT NULL DEFAULT false, hidden boolean NOT NULL DEFAULT false)", statusType, g.tsType, g.tsType, g.tsType, g.tsType)
	return b.String()
}

func tp(t time.Time) *time.Time { return &t }
func sp(s string) *string       { return &s }

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
	canClaim := claimColumn(o) != "" || (g.style == config.StyleStatus && len(o.InFlight) > 0)
	switch {
	case x < 40 && canClaim && (w.lease == nil || !at.Before(w.lease.expiry)):
		// A relay claims a pending row, or reclaims one whose lease ran
		// out (its holder died: seed 000, C3).
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
	case x < 80 && g.style == config.StyleStatus && contains(o.Unknown, g.st.maybe):
		if w.lease != nil {
			w.status = sp(g.st.maybe)
		} else if contains(o.Unknown, g.st.retry) {
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
