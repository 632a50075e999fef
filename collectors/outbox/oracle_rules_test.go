package outbox

// The oracle's rules: every outbox metric computed by brute force from a
// plain SELECT of the whole table, with the rules as README.md writes
// them, written again here without the collector's code (only its choice
// of which label values keep their own series, Sampler.Fold, is taken
// from it, and checked for its own promises).

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// oRow is one row as the oracle reads it.
type oRow struct {
	id                                  int64
	created, published, dead, lu, claim *time.Time
	labels                              []string
	status                              *string
	attempts                            int
	flag, hidden                        bool
}

type oracle struct {
	g    *genTable
	zone *time.Location // the session's TimeZone
	// Counter state since the collector (re)started.
	k          int
	prevNow    time.Time
	readPub    map[int64]bool
	readLease  map[string]bool
	prevLive   map[string]oLease
	published  map[string]float64
	late       map[string]float64
	buckets    []float64
	latCount   float64
	latSum     float64
	leasesLow  float64 // expiries the README says are counted
	leasesHigh float64 // plus the lease_until reclaims that truly came after the expiry
}

type oLease struct {
	id            int64
	value, expiry time.Time
}

func newOracle(g *genTable, zone *time.Location) *oracle {
	o := &oracle{g: g, zone: zone}
	o.reset()
	return o
}

// reset: the collector starts fresh (a first start or a changed config).
func (o *oracle) reset() {
	o.k = 0
	o.readPub, o.readLease, o.prevLive = map[int64]bool{}, map[string]bool{}, nil
	o.published, o.late = map[string]float64{}, map[string]float64{}
	o.buckets = make([]float64, len(LatencyBuckets))
	o.latCount, o.latSum, o.leasesLow, o.leasesHigh = 0, 0, 0, 0
}

// read selects the whole table: the oracle's only input besides the clock.
func (o *oracle) read(t *testing.T, ctx context.Context, admin *pgxpool.Pool) []oRow {
	g := o.g
	var lc []string
	for i := range g.o.Labels {
		lc = append(lc, fmt.Sprintf(", l%d", i))
	}
	rows, err := admin.Query(ctx, fmt.Sprintf(`SELECT id, created_at, published_at, dead_at, lease_until, claimed_at,
	  status::text, attempts, flag, hidden%s FROM public.%s ORDER BY id`, strings.Join(lc, ""), g.name))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []oRow
	for rows.Next() {
		var (
			x      oRow
			ts     [5]*time.Time
			labels = make([]*string, len(g.o.Labels))
		)
		dest := []any{&x.id, &ts[0], &ts[1], &ts[2], &ts[3], &ts[4], &x.status, &x.attempts, &x.flag, &x.hidden}
		for i := range labels {
			dest = append(dest, &labels[i])
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		for i, p := range ts {
			ts[i] = o.instant(p)
		}
		x.created, x.published, x.dead, x.lu, x.claim = ts[0], ts[1], ts[2], ts[3], ts[4]
		for _, l := range labels {
			if l == nil {
				x.labels = append(x.labels, "")
			} else {
				x.labels = append(x.labels, *l)
			}
		}
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// instant turns a value read from a timestamp column into the instant it
// means: a `timestamp without time zone` is a wall clock in time_zone,
// else in the session's TimeZone (README, time_zone).
func (o *oracle) instant(p *time.Time) *time.Time {
	if p == nil || o.g.tsType != "timestamp" {
		return p
	}
	zone := o.zone
	if o.g.o.TimeZone != "" {
		zone, _ = time.LoadLocation(o.g.o.TimeZone)
	}
	u := p.UTC()
	v := time.Date(u.Year(), u.Month(), u.Day(), u.Hour(), u.Minute(), u.Second(), u.Nanosecond(), zone)
	return &v
}

// Row states as README "A row's state" names them.
const (
	oPending      = "pending"
	oInFlight     = "in_flight"
	oExpired      = "lease_expired"
	oDead         = "dead"
	oPublished    = "published"
	oUnclassified = "unclassified"
)

func in(list []string, s *string) bool {
	if s == nil {
		return false
	}
	for _, v := range list {
		if v == *s || (isInt(v) && isInt(*s) && atoi(v) == atoi(*s)) {
			return true
		}
	}
	return false
}

func isInt(s string) bool {
	_, err := fmt.Sscanf(strings.TrimSpace(s), "%d", new(int))
	return err == nil && strings.Trim(strings.TrimSpace(s), "-0123456789") == ""
}

func atoi(s string) int {
	var n int
	fmt.Sscanf(strings.TrimSpace(s), "%d", &n)
	return n
}

// claimValue is the claim column's value: claimed_at, else lease_until.
func (o *oracle) claimValue(x oRow) *time.Time {
	switch {
	case o.g.o.ClaimedAt != "":
		return x.claim
	case o.g.o.LeaseUntil != "":
		return x.lu
	}
	return nil
}

// expiry is when the row's lease runs out; nil without a lease to judge.
func (o *oracle) expiry(x oRow) *time.Time {
	c := o.g.o
	switch {
	case c.LeaseUntil != "":
		return x.lu
	case c.ClaimedAt != "" && c.LeaseTTL > 0 && x.claim != nil:
		e := x.claim.Add(c.LeaseTTL)
		return &e
	}
	return nil
}

// state is README "A row's state", read literally.
func (o *oracle) state(x oRow, now time.Time) string {
	c := o.g.o
	claimed := o.claimValue(x) != nil
	switch c.Style() {
	case config.StyleStatus:
		switch {
		case in(c.Published, x.status):
			return oPublished
		case in(c.Dead, x.status):
			return oDead
		case in(c.InFlight, x.status):
			claimed = true
		case in(c.Pending, x.status):
			// "when in_flight statuses are configured, the status alone
			// decides whether a row is claimed"
			claimed = claimed && len(c.InFlight) == 0
		case in(c.Unknown, x.status):
			claimed = true
		default:
			return oUnclassified
		}
	case config.StyleTimestamps:
		if c.PublishedAt != "" && x.published != nil {
			return oPublished
		}
		if c.DeadAt != "" && x.dead != nil {
			return oDead
		}
	}
	if !claimed {
		return oPending
	}
	if e := o.expiry(x); e != nil && e.Before(now) {
		return oExpired
	}
	return oInFlight
}

func (o *oracle) unknown(x oRow, st string) bool {
	c := o.g.o
	if st != oPending && st != oInFlight && st != oExpired {
		return false
	}
	return (c.Style() == config.StyleStatus && in(c.Unknown, x.status)) ||
		(st == oExpired && c.Attempts != "" && x.attempts > 0) ||
		(c.UnknownWhen != "" && x.flag)
}

// oSeries is what the oracle expects of one series.
type oSeries struct {
	events                                         map[string]float64
	oldest                                         float64
	past, retried, unknown, unclassified, deadline float64
	claimed                                        float64
}

// oSample is what the oracle expects of one sample.
type oSample struct {
	series                                                     map[string]*oSeries // by folded label key
	labels                                                     map[string][]string
	unpublished, dead, unclassified, claimed, unknownUnclaimed float64
}

func (o *oracle) visible(rows []oRow) []oRow {
	var out []oRow
	for _, x := range rows {
		if o.g.o.Filter != "" && x.hidden {
			continue
		}
		out = append(out, x)
	}
	return out
}

// sample computes every gauge, and advances the counters, at now.
func (o *oracle) sample(now time.Time, all []oRow, s *Sampler) *oSample {
	c := o.g.o
	rows := o.visible(all)
	out := &oSample{series: map[string]*oSeries{}, labels: map[string][]string{}}
	at := func(vals []string) *oSeries {
		f := s.Fold(vals)
		k := joinLabels(f)
		x, ok := out.series[k]
		if !ok {
			x = &oSeries{events: map[string]float64{}, deadline: c.DeadlineFor(first(f)).Seconds()}
			if len(f) == 0 {
				x.deadline = c.Deadline.Seconds()
			}
			out.series[k] = x
			out.labels[k] = f
		}
		return x
	}
	for _, x := range rows {
		st := o.state(x, now)
		if st == oPublished {
			continue
		}
		se := at(x.labels)
		switch st {
		case oUnclassified:
			se.unclassified++
			out.unclassified++
			continue
		case oDead:
			se.events[oDead]++
			out.dead++
			continue
		}
		out.unpublished++
		se.events[st]++
		if st != oPending {
			se.claimed++
			out.claimed++
		}
		if x.created != nil {
			age := now.Sub(*x.created).Seconds()
			if age > se.oldest {
				se.oldest = age
			}
			if age > se.deadline {
				se.past++
			}
		}
		if c.Attempts != "" && x.attempts > 0 {
			se.retried++
		}
		if o.unknown(x, st) {
			se.unknown++
			if st == oPending {
				out.unknownUnclaimed++
			}
		}
	}
	o.counters(now, rows, s)
	return out
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// counters advances the published counters and the lease expiries by the
// README's rules: counting starts at the collector's first sample; a row
// published (or a lease expired) up to 30 s before the last sample's time
// is still counted once; a lease seen live and found moved on after its
// expiry by a late publish or a reclaim counts.
func (o *oracle) counters(now time.Time, rows []oRow, s *Sampler) {
	c := o.g.o
	lo := now.Add(-SkewWindow)
	if o.k > 0 {
		lo = o.prevNow.Add(-SkewWindow)
	}
	if c.PublishedAt != "" {
		for _, x := range rows {
			if x.published == nil || o.readPub[x.id] || !x.published.After(lo) {
				continue
			}
			o.readPub[x.id] = true
			if o.k == 0 {
				continue
			}
			f := s.Fold(x.labels)
			key := joinLabels(f)
			o.published[key]++
			if x.created == nil {
				continue
			}
			lat := math.Max(x.published.Sub(*x.created).Seconds(), 0)
			if lat > c.DeadlineFor(first(f)).Seconds() && len(f) > 0 || len(f) == 0 && lat > c.Deadline.Seconds() {
				o.late[key]++
			}
			o.latCount++
			o.latSum += lat
			for i, b := range LatencyBuckets {
				if lat <= b {
					o.buckets[i]++
				}
			}
		}
	}
	if c.LeaseUntil != "" || c.ClaimedAt != "" && c.LeaseTTL > 0 {
		o.leaseCounters(now, lo, rows)
	}
	o.k++
	o.prevNow = now
}

func (o *oracle) leaseCounters(now, lo time.Time, rows []oRow) {
	byID := map[int64]oRow{}
	held := map[string]oLease{}
	for _, x := range rows {
		byID[x.id] = x
		st := o.state(x, now)
		lv := o.claimValue(x)
		if (st != oInFlight && st != oExpired) || lv == nil {
			continue
		}
		l := oLease{id: x.id, value: *lv, expiry: *o.expiry(x)}
		held[fmt.Sprint(l.id, l.value.UnixMicro())] = l
	}
	live := map[string]oLease{}
	for k, l := range held {
		switch {
		case !l.expiry.Before(now):
			live[k] = l
		case l.expiry.After(lo) && !o.readLease[k]:
			// Still held, expired since the last sample.
			o.readLease[k] = true
			if o.k > 0 {
				o.leasesLow++
				o.leasesHigh++
			}
		}
	}
	for k, l := range o.prevLive {
		if _, ok := held[k]; ok || l.expiry.After(now) {
			continue
		}
		x, ok := byID[l.id]
		if !ok {
			continue
		}
		st := o.state(x, now)
		switch {
		case st == oPublished:
			if x.published != nil && x.published.After(l.expiry) {
				o.leasesLow++
				o.leasesHigh++
			}
		case st == oInFlight || st == oExpired:
			nv := o.claimValue(x)
			if nv == nil || nv.Equal(l.value) {
				continue
			}
			if o.g.o.LeaseUntil == "" {
				if nv.After(l.expiry) {
					o.leasesLow++
					o.leasesHigh++
				}
			} else if nv.Add(-o.g.tau).After(l.expiry) {
				// The new claim truly began after the expiry; the
				// collector may count it once it has bounded the lease
				// length.
				o.leasesHigh++
			}
		}
	}
	o.prevLive = live
}

const ageTolerance = 1e-3

var labelPairRe = regexp.MustCompile(`([a-z_]+)="((?:[^"\\]|\\.)*)"`)
