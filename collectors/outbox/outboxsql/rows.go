package outboxsql

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// NowQuery reads the database's transaction time in microseconds.
const NowQuery = `SELECT (extract(epoch from ` + ReadNow + `) * 1000000)::int8`

// MaxPublishedRows bounds the rows one read of published rows (or of
// expired leases) returns; past it the watermark catches up over the
// following scrapes.
const MaxPublishedRows = 100000

// MaxLiveLeases bounds the live leases a sample remembers to judge at the
// next one: the earliest to expire first, which are the ones that can
// expire before the next sample. Relays keep a batch each in flight; a
// thousand leases read cost about 2 ms during the 2M-row incident
// benchmark, ten thousand 25 ms.
const MaxLiveLeases = 1000

// sinceBound is the exclusive lower bound of a watermark read: $1
// (microseconds since the epoch), or now() - SkewWindow when NULL.
func sinceBound() string {
	return "coalesce('epoch'::timestamptz + $1::int8 * interval '1 microsecond', " + ReadNow + " - " + interval(SkewWindow) + ")"
}

// LeaseQuery reads the claimed unpublished rows whose lease expired after
// $1 (microseconds since the epoch, exclusive; NULL means now() -
// SkewWindow) and before now, earliest expiry first, at most
// MaxPublishedRows; "" without a lease to judge. Each scrape reads only
// the leases that expired since the last one (a range of the lease
// index), not every lease still expired, so a relay that died holding
// many rows costs one read of them. Columns: id, lease column and expiry,
// both in microseconds since the epoch.
func (s *Spec) LeaseQuery() string {
	lc := s.LeaseColumn()
	if lc == "" {
		return ""
	}
	c := col(lc)
	var passed string
	if s.O.LeaseUntil != "" {
		passed = c + " < " + s.bound(lc, ReadNow) + " AND " + c + " > " + s.bound(lc, sinceBound())
	} else {
		// claimed_at < now() - ttl, not claimed_at + ttl < now(), so that an
		// index on claimed_at serves it.
		ttl := interval(s.O.LeaseTTL)
		passed = c + " < " + s.bound(lc, ReadNow+" - "+ttl) + " AND " + c + " > " + s.bound(lc, sinceBound()+" - "+ttl)
	}
	return fmt.Sprintf(`SELECT %s::text, %s, %s
FROM %s t WHERE %s ORDER BY %s LIMIT %d`,
		col(s.O.ID), epochMicros(s.tz(lc, c)), epochMicros(s.leaseExpiry(c)), s.table,
		s.where(s.unpublished(), s.ClaimedPredicate(), passed), c, MaxPublishedRows)
}

// LiveLeaseQuery reads the claimed unpublished rows whose lease has not
// expired yet, earliest expiry first, at most MaxLiveLeases: the sampler
// remembers them and judges at the next sample those that expired and
// moved on in between (a reclaim, a late publish). "" without a lease.
// Columns: id, lease column and expiry in microseconds since the epoch.
func (s *Spec) LiveLeaseQuery() string {
	lc := s.LeaseColumn()
	if lc == "" {
		return ""
	}
	c := col(lc)
	live := c + " >= " + s.bound(lc, ReadNow)
	if s.O.LeaseUntil == "" {
		live = c + " >= " + s.bound(lc, ReadNow+" - "+interval(s.O.LeaseTTL))
	}
	return fmt.Sprintf(`SELECT %s::text, %s, %s
FROM %s t WHERE %s ORDER BY %s LIMIT %d`,
		col(s.O.ID), epochMicros(s.tz(lc, c)), epochMicros(s.leaseExpiry(c)), s.table,
		s.where(s.unpublished(), s.ClaimedPredicate(), live), c, MaxLiveLeases)
}

// Fate classes of LeaseFateQuery.
const (
	FateUnpublished = iota
	FatePublished
	FateDead
	FateUnclassified
)

// LeaseFateQuery reads, for the ids in $1 (text), what became of each
// row: its class, whether it is claimed, its published_at and its lease
// column, both in microseconds since the epoch (NULL when not set or not
// configured). It looks the ids up by the id column's own type, so that
// its index serves it. "" without a lease.
func (s *Spec) LeaseFateQuery() string {
	lc := s.LeaseColumn()
	if lc == "" {
		return ""
	}
	r := s.rules("t.")
	class := "CASE"
	if p := r.published(); p != "" {
		class += " WHEN " + p + " THEN " + strconv.Itoa(FatePublished)
	}
	if p := r.dead(); p != "" {
		class += " WHEN " + p + " THEN " + strconv.Itoa(FateDead)
	}
	if up := r.unpublished(); up != "" {
		class += " WHEN " + up + " THEN " + strconv.Itoa(FateUnpublished) + " ELSE " + strconv.Itoa(FateUnclassified) + " END"
	} else {
		class = strconv.Itoa(FateUnpublished)
	}
	claimed := "false"
	if cl := s.ClaimedPredicate(); cl != "" {
		claimed = "coalesce(" + cl + ", false)"
	}
	pub := "NULL::int8"
	if s.O.PublishedAt != "" {
		pub = epochMicros(s.tz(s.O.PublishedAt, col(s.O.PublishedAt)))
	}
	idType := "text"
	if c, ok := s.cols[s.O.ID]; ok && c.Type != "" {
		idType = pg.Ident(c.Type)
	}
	return fmt.Sprintf(`SELECT %s::text, %s, %s, %s, %s FROM %s t WHERE %s`,
		col(s.O.ID), class, claimed, pub, epochMicros(s.tz(lc, col(lc))), s.table,
		s.where(col(s.O.ID)+" = ANY($1::text[]::"+idType+"[])"))
}

// PublishedQuery reads rows published after $1 (microseconds since the
// epoch, exclusive; NULL means now() - SkewWindow), oldest first, at most
// MaxPublishedRows; "" without published_at. Columns: id, labels...,
// published_at in microseconds, latency seconds (NULL for a NULL
// created_at).
func (s *Spec) PublishedQuery() string {
	o := s.O
	if o.PublishedAt == "" {
		return ""
	}
	pub := s.tz(o.PublishedAt, col(o.PublishedAt))
	sel := []string{col(o.ID) + "::text"}
	sel = append(sel, s.labelExprs()...)
	lat := "NULL::float8" // no creation time: no latency
	if !o.NoCreatedAt() {
		lat = "extract(epoch from " + pub + " - " + s.tz(o.CreatedAt, col(o.CreatedAt)) + ")::float8"
	}
	sel = append(sel, epochMicros(pub), lat)
	sel = append(sel, s.publishedExtras()...)
	return fmt.Sprintf(`SELECT %s FROM %s t WHERE %s ORDER BY %s LIMIT %d`,
		strings.Join(sel, ", "), s.table,
		s.where(col(o.PublishedAt)+" > "+s.bound(o.PublishedAt, sinceBound())),
		col(o.PublishedAt), MaxPublishedRows)
}

// stuckColumns are the columns of a stuck row: id, facts, labels, age in
// seconds, attempts and the trimmed last error.
func (s *Spec) stuckColumns() []string {
	o := s.O
	sel := []string{col(o.ID) + "::text"}
	sel = append(sel, s.factExprs()...)
	sel = append(sel, s.labelExprs()...)
	// Never negative (a writer's clock ahead), 0 for a NULL created_at.
	// Without created_at the stuck page cannot know an age: 0 there, and
	// the row says its age is unknown.
	if o.NoCreatedAt() {
		sel = append(sel, "0::float8")
	} else {
		sel = append(sel, "greatest(coalesce(extract(epoch from "+ReadNow+" - "+s.tz(o.CreatedAt, col(o.CreatedAt))+")::float8, 0), 0)")
	}
	if o.Attempts != "" {
		sel = append(sel, "coalesce("+col(o.Attempts)+", 0)::int8")
	} else {
		sel = append(sel, "0::int8")
	}
	if o.LastError != "" {
		sel = append(sel, "coalesce(left("+col(o.LastError)+"::text, "+strconv.Itoa(LastErrorChars)+"), '')")
	} else {
		sel = append(sel, "''::text")
	}
	return sel
}

// StuckQuery reads the oldest unpublished rows, at most $1. Columns:
// id, facts..., labels..., age seconds, attempts, last_error (at most
// 200 characters).
//
// An index on created_at over the unpublished rows serves ORDER BY
// created_at LIMIT directly: without labels the unpublished index, with
// labels the oldest index (Indexes). A skip-scan over the label
// combinations would stop after MaxOldestTuples of them and list fresh
// rows while an old one waits past them. Rows without created_at come
// last.
func (s *Spec) StuckQuery() string {
	sel := s.stuckColumns()
	return fmt.Sprintf(`SELECT %s FROM %s t WHERE %s ORDER BY %s LIMIT $1`,
		strings.Join(sel, ", "), s.table, s.where(s.unpublished()), col(s.OrderColumn()))
}

// SkewWindow is the commit skew the published counters tolerate: a row
// whose transaction commits up to SkewWindow after its published_at is
// still counted, exactly once. Each read of published rows goes back
// SkewWindow before the previous read's time, and the ids already counted
// inside that trailing window are remembered, so a re-read row is not
// counted again. A row that becomes visible later than SkewWindow after
// its published_at is missed.
const SkewWindow = 30 * time.Second

// LastErrorChars is how many characters of last_error a stuck row shows.
const LastErrorChars = 200
