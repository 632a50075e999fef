package audit

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// The audit oracle's generator: a seeded, repeatable outbox table and the
// records of its topics, over a history of two auditor lifetimes (a
// restart between them), with every state the audit distinguishes:
// status text and integer values, published_at or not, dead_at, deleted
// on publish, NULL and unlisted statuses, timestamp and timestamptz,
// backlog rows created long before they were published, lost and
// duplicated records, records of dead and unpublished rows, malformed
// records, partitions trimmed by retention before either start, ids as
// text, uuid and bigint carried in a header, the key or a nested JSON
// field, and (one seed in eight) ids written differently on the topics.

type oStyle int

const (
	styleStatusText          oStyle = iota // status text, published_at timestamptz
	styleStatusInt                         // status integer, published_at timestamp
	styleStatusNoPublishedAt               // status text only
	styleTimestamps                        // published_at and dead_at
	styleDeleteOnPublish                   // rows are deleted when published
	numStyles
)

func (s oStyle) String() string {
	return [...]string{"status-text", "status-int", "status-no-published_at", "timestamps", "delete-on-publish"}[s]
}

// oRow is one outbox row; the fields are the columns.
type oRow struct {
	id        string
	status    *string // SQL text of the status value; nil is NULL
	class     Class   // what the rules make of it
	created   time.Time
	published *time.Time
	dead      *time.Time
	lease     *time.Time // lease_until (timestamps style): claimed by a relay
	deleted   bool       // deleted on publish: not in the table
}

// oRecord is one record to produce.
type oRecord struct {
	topic string
	part  int32
	id    string // the id's text as the topics carry it; "" is malformed
	ts    time.Time
}

type oracleCase struct {
	seed     int64
	rng      *rand.Rand
	style    oStyle
	idKind   int // 0 text (a UUID), 1 uuid, 2 bigint
	tsType   string
	source   string
	mismatch bool
	window   time.Duration
	grace    time.Duration
	sample   float64
	base     time.Time // the first auditor starts here
	delta    time.Duration
	width    time.Duration // the window's bucket width
	bandLo   time.Time     // no generated time falls inside [bandLo, bandHi]
	bandHi   time.Time
	rows     []*oRow
	byID     map[string]*oRow
	topics   []string
	nextID   int
}

func newOracleCase(seed int64, base time.Time) *oracleCase {
	rng := rand.New(rand.NewPCG(uint64(seed), 0xa0d17))
	c := &oracleCase{seed: seed, rng: rng, byID: map[string]*oRow{}}
	c.style = oStyle(rng.IntN(int(numStyles)))
	c.idKind = rng.IntN(3)
	c.tsType = []string{"timestamptz", "timestamp"}[rng.IntN(2)]
	if c.style == styleStatusInt {
		c.tsType = "timestamp"
	}
	c.source = []string{"header:event_id", "key", "json:payload.id"}[rng.IntN(3)]
	c.mismatch = rng.IntN(8) == 0
	c.window = []time.Duration{20 * time.Minute, time.Hour}[rng.IntN(2)]
	c.grace = []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute}[rng.IntN(3)]
	c.sample = []float64{1, 1, 0.5, 0.25}[rng.IntN(4)]
	c.base = base
	c.width = max(c.window/bucketsPerWindow, time.Second)
	// Two comparisons a settled distance apart: every record read at a
	// start is in its time bucket's place or the start's (see
	// window.add), so by then lost acknowledgements are judged exactly.
	c.delta = c.width + c.grace + 30*time.Second
	// The window's edge is as coarse as a bucket: no generated time falls
	// near it at any clock the history uses (base .. base+2·delta).
	m := 3*c.width + c.grace + 10*time.Second
	c.bandLo = base.Add(-c.window - m)
	c.bandHi = base.Add(2*c.delta - c.window + m)
	return c
}

func (c *oracleCase) String() string {
	return fmt.Sprintf("seed %d: style %s, id kind %d, %s, source %s, mismatch %v, window %v, grace %v, sample %v",
		c.seed, c.style, c.idKind, c.tsType, c.source, c.mismatch, c.window, c.grace, c.sample)
}

func (c *oracleCase) inBand(t time.Time) bool { return !t.Before(c.bandLo) && !t.After(c.bandHi) }

// ago picks a whole second between lo and hi before base, outside the
// band.
func (c *oracleCase) ago(lo, hi time.Duration) time.Time {
	for {
		t := c.base.Add(-lo - time.Duration(c.rng.Int64N(int64((hi-lo)/time.Second)+1))*time.Second)
		if !c.inBand(t) {
			return t
		}
	}
}

// after picks t plus a whole second in [lo, hi], outside the band; ok is
// false if none was found.
func (c *oracleCase) after(t time.Time, lo, hi time.Duration) (time.Time, bool) {
	for i := 0; i < 50; i++ {
		u := t.Add(lo + time.Duration(c.rng.Int64N(int64((hi-lo)/time.Second)+1))*time.Second)
		if !c.inBand(u) {
			return u, true
		}
	}
	return time.Time{}, false
}

func (c *oracleCase) newID() string {
	c.nextID++
	switch c.idKind {
	case 2:
		return strconv.Itoa(1000 + c.nextID*7 + c.rng.IntN(7))
	default:
		var b [16]byte
		for i := range b {
			b[i] = byte(c.rng.IntN(256))
		}
		b[6] = b[6]&0x0f | 0x40
		b[8] = b[8]&0x3f | 0x80
		return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	}
}

// onTopic is how the topics write an id: the same text, or, in a mismatch
// seed, upper case (UUIDs) or with a prefix (numbers).
func (c *oracleCase) onTopic(id string) string {
	if !c.mismatch {
		return id
	}
	if c.idKind == 2 {
		return "evt-" + id
	}
	return strings.ToUpper(id)
}

// status values by class, as the configuration lists them.
func (c *oracleCase) statusOf(class Class) *string {
	var v string
	if c.style == styleStatusInt {
		v = map[Class]string{Unpublished: []string{"0", "1", "4"}[c.rng.IntN(3)], Published: "2", Dead: "3", Ignored: "9"}[class]
	} else {
		v = map[Class]string{Unpublished: []string{"PENDING", "CLAIMED", "UNKNOWN"}[c.rng.IntN(3)], Published: "PUBLISHED", Dead: "ABANDONED", Ignored: "LEGACY"}[class]
	}
	if class == Ignored && c.rng.IntN(2) == 0 {
		return nil // a NULL status is in no state either
	}
	return &v
}

// setClass gives r a class and the columns that say it, published or dead
// at time at.
func (c *oracleCase) setClass(r *oRow, class Class, at time.Time) {
	r.class = class
	r.published, r.dead, r.status, r.lease = nil, nil, nil, nil
	switch c.style {
	case styleStatusText, styleStatusInt, styleStatusNoPublishedAt:
		r.status = c.statusOf(class)
		if class == Published && c.style != styleStatusNoPublishedAt {
			r.published = &at
		}
	case styleTimestamps:
		switch class {
		case Published:
			r.published = &at
		case Dead:
			r.dead = &at
		case Ignored:
			r.class = Unpublished
		}
		if r.class == Unpublished && c.rng.IntN(2) == 0 {
			l := c.base.Add(time.Duration(c.rng.IntN(600)-300) * time.Second)
			r.lease = &l
		}
	case styleDeleteOnPublish:
		switch class {
		case Published:
			r.deleted = true
		case Dead, Ignored:
			r.class = Unpublished
		}
	}
}

func (c *oracleCase) addRow(created time.Time, class Class, at time.Time) *oRow {
	if c.inBand(created) {
		// Derived by arithmetic; keep it off the window's edge too.
		created = c.bandLo.Add(-time.Duration(1+c.rng.IntN(3600)) * time.Second)
	}
	r := &oRow{id: c.newID(), created: created}
	c.setClass(r, class, at)
	c.rows = append(c.rows, r)
	c.byID[r.id] = r
	return r
}

func (c *oracleCase) record(id string, ts time.Time) oRecord {
	t := c.rng.IntN(3)
	p := int32(0)
	if t < 2 {
		p = int32(t)
		t = 0
	} else {
		t = 1
	}
	rec := oRecord{topic: c.topics[t], part: p, ts: ts}
	if id != "" {
		rec.id = c.onTopic(id)
	}
	return rec
}

// initial generates the rows and records as they are when the first
// auditor starts at base.
func (c *oracleCase) initial() []oRecord {
	var recs []oRecord
	n := 20 + c.rng.IntN(100)
	old := c.window + 40*time.Minute
	for i := 0; i < n; i++ {
		switch c.rng.IntN(11) {
		case 0, 1, 2: // published, on the topics (perhaps long ago, perhaps a backlog row)
			ts := c.ago(c.grace+5*time.Second, old)
			pub, ok := c.after(ts, 0, 5*time.Second)
			if !ok {
				continue
			}
			created := c.ago(time.Duration(c.base.Sub(pub))+time.Duration(c.rng.IntN(3))*time.Hour, time.Duration(c.base.Sub(pub))+3*time.Hour)
			c.addRow(created, Published, pub)
			recs = append(recs, c.record(c.rows[len(c.rows)-1].id, ts))
		case 3: // published, never reached the broker
			pub := c.ago(c.grace, old)
			c.addRow(c.ago(time.Duration(c.base.Sub(pub)), time.Duration(c.base.Sub(pub))+2*time.Hour), Published, pub)
		case 4: // published inside grace: judged only at the second comparison
			pub := c.ago(time.Second, c.grace-time.Second)
			r := c.addRow(c.ago(time.Duration(c.base.Sub(pub)), time.Duration(c.base.Sub(pub))+time.Hour), Published, pub)
			if c.rng.IntN(2) == 0 {
				recs = append(recs, c.record(r.id, pub))
			}
		case 5: // unpublished, not on the topics (a backlog)
			c.addRow(c.ago(time.Second, 3*time.Hour), Unpublished, time.Time{})
		case 6: // unpublished, on the topics: the acknowledgement was lost
			ts := c.ago(2*c.width+c.grace, old)
			r := c.addRow(c.ago(time.Duration(c.base.Sub(ts)), time.Duration(c.base.Sub(ts))+2*time.Hour), Unpublished, time.Time{})
			recs = append(recs, c.record(r.id, ts))
		case 7: // unpublished, just published: inside grace
			ts := c.ago(time.Second, 10*time.Second)
			r := c.addRow(c.ago(10*time.Second, time.Hour), Unpublished, time.Time{})
			recs = append(recs, c.record(r.id, ts))
		case 8: // dead, perhaps on the topics
			created := c.ago(time.Minute, old)
			at, ok := c.after(created, 0, 30*time.Minute)
			if !ok || at.After(c.base) {
				continue
			}
			r := c.addRow(created, Dead, at)
			if c.rng.IntN(2) == 0 {
				if ts, ok := c.after(created, 0, time.Duration(at.Sub(created))); ok {
					recs = append(recs, c.record(r.id, ts))
				}
			}
		case 9: // a status no state lists, or NULL; perhaps on the topics
			r := c.addRow(c.ago(time.Minute, old), Ignored, time.Time{})
			if c.rng.IntN(2) == 0 {
				recs = append(recs, c.record(r.id, c.ago(time.Minute, old)))
			}
		case 10: // published more than once
			ts := c.ago(c.grace+time.Minute, old)
			r := c.addRow(ts.Add(-time.Minute), Published, ts)
			for k := 0; k < 2+c.rng.IntN(2); k++ {
				recs = append(recs, c.record(r.id, ts))
				if u, ok := c.after(ts, time.Second, time.Minute); ok && u.Before(c.base) {
					ts = u
				}
			}
		}
	}
	for i := c.rng.IntN(4); i > 0; i-- {
		recs = append(recs, c.record("", c.ago(time.Second, old)))
	}
	return recs
}

// live generates what happens between a comparison at from and the next
// at to: rows published (with or without their record), new rows, extra
// copies of ids and malformed records. Records carry times just before
// to; table changes are applied by the caller from the returned rows.
func (c *oracleCase) live(from, to time.Time) (changed []*oRow, recs []oRecord) {
	liveTS := func() time.Time { return to.Add(-time.Duration(1+c.rng.IntN(9)) * time.Second) }
	for _, r := range c.rows {
		if r.class != Unpublished || c.rng.IntN(3) != 0 {
			continue
		}
		at := from.Add(time.Duration(1+c.rng.IntN(int(to.Sub(from)/time.Second)-1)) * time.Second)
		c.setClass(r, Published, at)
		changed = append(changed, r)
		if c.rng.IntN(10) < 7 {
			recs = append(recs, c.record(r.id, liveTS()))
		}
	}
	for i := c.rng.IntN(8); i > 0; i-- {
		created := from.Add(time.Duration(1+c.rng.IntN(int((to.Sub(from)-c.grace)/time.Second)-1)) * time.Second)
		switch c.rng.IntN(3) {
		case 0:
			r := c.addRow(created, Published, created.Add(time.Second))
			if c.rng.IntN(5) > 0 {
				recs = append(recs, c.record(r.id, liveTS()))
			}
		case 1:
			c.addRow(created, Unpublished, time.Time{})
		case 2:
			r := c.addRow(created, Unpublished, time.Time{})
			recs = append(recs, c.record(r.id, liveTS()))
		}
		changed = append(changed, c.rows[len(c.rows)-1])
	}
	for i := c.rng.IntN(6); i > 0 && len(c.rows) > 0; i-- {
		recs = append(recs, c.record(c.rows[c.rng.IntN(len(c.rows))].id, liveTS()))
	}
	for i := c.rng.IntN(3); i > 0; i-- {
		recs = append(recs, c.record("", liveTS()))
	}
	return changed, recs
}
