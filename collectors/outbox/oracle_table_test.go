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
