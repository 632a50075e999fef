package outbox

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"
)

// part says which query a group was read by.
type part int

const (
	// partAll: the state query, exact (not capped).
	partAll part = iota
	// partPending, partClaimed, partUnknown: the capped reads. Unknown
	// results of unclaimed rows come from partUnknown only, so that no
	// row is counted twice.
	partPending
	partClaimed
	partUnknown
	// partClaimedCapped: the claimed rows' per label set reads, whose
	// unknown results come from partUnknown.
	partClaimedCapped
	// partWalk, partOverride, partProbe: the capped reads of the oldest
	// unpublished rows (outboxsql/walk.go, cover.go); partPending is then
	// the per label set read, run only when these cannot cover every
	// series.
	partWalk
	partOverride
	partProbe
	partProbeAge
)

type group struct {
	part   part
	facts  Facts
	labels []string
	rows   int64
	age    float64
	// late holds the rows past each of the outbox's deadlines, in the
	// order of Spec.Deadlines (a slice: a sample may read thousands of
	// groups).
	late []int64
	// folded and key: the series the series cap the capped reads
	// admitted on a copy (read.admitted) folds labels into, once asked
	// (read.fold), so that the sample folds each group once.
	folded  []string
	key     string
	hasFold bool
}

type oldest struct {
	labels []string
	age    float64
}

// read is what one sample's queries fetched, before any decision.
type read struct {
	now    int64
	groups []group
	// walked: the unpublished rows were capped and read in time order
	// (partWalk); fallback: the per label set read (partPending) ran too.
	walked, fallback bool
	// oldest are the per combination oldest ages of the fallback.
	oldest []oldest
	// admitted is the series cap as the capped reads admitted on a copy
	// (cover.go), nil when they did not.
	admitted *SeriesCap
	// claimed are the walks of the claimed rows while more than
	// max_count are claimed (claimedcover.go), one per part.
	claimed []claimedWalk
	// claimedCount is how many rows are claimed, up to max_count+1,
	// while the unpublished rows are capped.
	claimedCount int64
	// ahead holds the answers of the reads sent ahead, by their text,
	// until a follow-up takes them; sent are the follow-up reads this
	// sample queued or took (ahead.go).
	ahead        map[string]*aheadAnswer
	sent         []aheadRead
	dead         []group
	unclassified []group
	leases       []Mark
	live         []liveLease
	fates        map[string]leaseFate
	published    []PublishedRow
	capped       bool
	order        orderRead
	// lowerBound are the series whose oldest age is a lower
	// bound: a bounded read of series no row was found of stopped early
	// (otherbound.go).
	lowerBound [][]string
	// walk is the sampler's otherWalk as this sample's walks moved it
	// (otherwalk.go), nil when none ran; apply keeps it.
	walk *otherWalk
}

// FactsFromBits decodes the facts column of the state query.
func FactsFromBits(status string, bits int32) Facts {
	return Facts{Status: status, ClaimSet: bits&outboxsql.FactClaim != 0, LeasePassed: bits&outboxsql.FactLeasePassed != 0,
		Attempted: bits&outboxsql.FactAttempted != 0, UnknownWhen: bits&outboxsql.FactUnknownWhen != 0}
}

// strs turns label values read from the table into label values: NULL
// is "", and invalid UTF-8 (text in a SQL_ASCII database may hold any
// bytes) has each invalid sequence replaced by U+FFFD, so that a metric
// can always be built from it.
func strs(ps []*string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		if p != nil {
			out[i] = strings.ToValidUTF8(*p, "\uFFFD")
		}
	}
	return out
}

// texts is strs for label values scanned as pgtype.Text (NULL is not
// Valid).
func texts(ts []pgtype.Text) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		if t.Valid {
			out[i] = strings.ToValidUTF8(t.String, "\uFFFD")
		}
	}
	return out
}

// queueGroups queues a state-shaped query whose groups are appended to
// *dst, tagged with the part that read them.
func queueGroups(b *pgx.Batch, q string, spec *boundSpec, p part, dst *[]group, what string) {
	queueSized(b, q, spec, p, dst, what, 0, nil)
}

// queueSized is queueGroups for a read that returned about hint groups
// at the last sample; read, if not nil, is told how many it returned.
func queueSized(b *pgx.Batch, q string, spec *boundSpec, p part, dst *[]group, what string, hint int, read func(int)) {
	b.Queue(q).Query(func(rows pgx.Rows) error {
		gs, err := scanGroups(rows, spec, hint)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for i := range gs {
			gs[i].part = p
		}
		if read != nil {
			read(len(gs))
		}
		addGroups(dst, gs)
		return nil
	})
}

// addGroups appends gs, which the caller gives up, to *dst.
func addGroups(dst *[]group, gs []group) {
	if len(*dst) == 0 {
		*dst = gs
		return
	}
	*dst = append(*dst, gs...)
}

// queueCounts queues a query of label values and a count (the dead and
// unclassified counts).
func queueCounts(b *pgx.Batch, q string, nl int, dst *[]group, what string) {
	b.Queue(q).Query(func(rows pgx.Rows) error {
		gs, err := scanCounts(rows, nl)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		*dst = append(*dst, gs...)
		return nil
	})
}

// scanGroups reads a state-shaped query. A capped sample reads up to
// max_count+1 groups here, so the scan targets are allocated once per
// query, not per row, the past-deadline counts share chunks, and the
// groups are allocated at once when the caller knows about how many
// come (hint: as many as the same read returned at the last sample).
// tail are destinations of columns past the state query's (a resumed
// walk's end, outboxsql.FoldResumeQuery), scanned from every row.
func scanGroups(rows pgx.Rows, spec *boundSpec, hint int, tail ...any) ([]group, error) {
	defer rows.Close()
	nl, nd := len(spec.O.Labels), len(spec.Deadlines())
	// Values, not pointers: pgx scans a pointer to a pointer through
	// reflection, a new value per column and row.
	var (
		out    = make([]group, 0, hint)
		status string
		bits   int32
		n      int64
		age    pgtype.Float8
		labels = make([]pgtype.Text, nl)
		late   = make([]int64, nd)
		chunk  []int64
	)
	dest := make([]any, 0, 4+nl+nd)
	dest = append(dest, &status, &bits)
	for i := range labels {
		dest = append(dest, &labels[i])
	}
	dest = append(dest, &n, &age)
	for i := range late {
		dest = append(dest, &late[i])
	}
	dest = append(dest, tail...)
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		if n <= 0 {
			continue
		}
		g := group{rows: n, labels: texts(labels), facts: FactsFromBits(status, bits)}
		if len(chunk) < nd {
			chunk = make([]int64, nd*256)
		}
		g.late, chunk = chunk[:nd:nd], chunk[nd:]
		copy(g.late, late)
		if age.Valid && age.Float64 > 0 {
			g.age = age.Float64
		}
		if len(out) == cap(out) {
			// Doubled: append grows a large slice by a quarter at a
			// time, allocating several times its size on the way.
			out = slices.Grow(out, max(len(out), 16))
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// scanCounts reads labels..., rows.
func scanCounts(rows pgx.Rows, nl int) ([]group, error) {
	defer rows.Close()
	var out []group
	for rows.Next() {
		var (
			g      group
			labels = make([]*string, nl)
			dest   []any
		)
		for i := range labels {
			dest = append(dest, &labels[i])
		}
		dest = append(dest, &g.rows)
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		g.labels = strs(labels)
		if g.rows > 0 {
			out = append(out, g)
		}
	}
	return out, rows.Err()
}

func scanOldest(rows pgx.Rows, nl int) ([]oldest, error) {
	defer rows.Close()
	var out []oldest
	for rows.Next() {
		var (
			labels = make([]*string, nl)
			age    *float64
			dest   []any
		)
		for i := range labels {
			dest = append(dest, &labels[i])
		}
		dest = append(dest, &age)
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		o := oldest{labels: strs(labels)}
		if age != nil && *age > 0 {
			o.age = *age
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// leaseKey identifies one lease of one row: a row claimed again has a new
// lease, so a new key.
func leaseKey(id string, lease int64) string { return id + "\x00" + strconv.FormatInt(lease, 10) }

func scanLeases(rows pgx.Rows) ([]Mark, error) {
	defer rows.Close()
	var out []Mark
	for rows.Next() {
		var (
			id            string
			lease, expiry int64
		)
		if err := rows.Scan(&id, &lease, &expiry); err != nil {
			return nil, err
		}
		out = append(out, Mark{Key: leaseKey(id, lease), At: expiry})
	}
	return out, rows.Err()
}

func scanLive(rows pgx.Rows) ([]liveLease, error) {
	defer rows.Close()
	var out []liveLease
	for rows.Next() {
		var l liveLease
		if err := rows.Scan(&l.id, &l.lease, &l.expiry); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

func scanFates(rows pgx.Rows) (map[string]leaseFate, error) {
	defer rows.Close()
	out := map[string]leaseFate{}
	for rows.Next() {
		var (
			id string
			f  leaseFate
		)
		if err := rows.Scan(&id, &f.class, &f.claimed, &f.publishedAt, &f.lease); err != nil {
			return nil, err
		}
		out[id] = f
	}
	return out, rows.Err()
}

func scanPublished(rows pgx.Rows, nl int) ([]PublishedRow, error) {
	defer rows.Close()
	var out []PublishedRow
	for rows.Next() {
		var (
			p      PublishedRow
			labels = make([]*string, nl)
			dest   = []any{&p.ID}
		)
		for i := range labels {
			dest = append(dest, &labels[i])
		}
		dest = append(dest, &p.PublishedAt, &p.Latency)
		dest = append(dest, publishedExtraDest(rows, nl, &p)...)
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		p.Labels = strs(labels)
		out = append(out, p)
	}
	return out, rows.Err()
}
