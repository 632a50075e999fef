package outbox

import "github.com/outbox-exporter/outbox_exporter/collectors/outbox/outboxsql"

// Relays that claim with FOR UPDATE SKIP LOCKED reclaim an expired row
// within a second, far inside a scrape interval, so most expired leases
// are never seen expired (a relay claims a row and dies; once the lease
// has run out, another relay reclaims the row). The sampler therefore remembers the live leases of
// each sample (bounded by the rows in flight, MaxLiveLeases) and judges
// at the next sample those that expired in between and are no longer
// held, from what became of their rows:
//
//   - published after the lease's expiry (published_at): the holder (or
//     another relay) published late, so the lease had run out first;
//   - claimed again with a new lease that began after the old one's
//     expiry: with claimed_at + lease_ttl the new claimed_at says so;
//     with lease_until the new claim began at the new lease_until minus
//     the lease length, which the sampler bounds from above by what it
//     has seen (a lease first seen at a sample was claimed after the
//     previous one), and it counts only when even that bound is past
//     the old expiry.
//
// What stays unseen: a row released (back to pending) or deleted after
// its lease expired, published without published_at, given up on, or
// claimed and moved on entirely between two samples; with lease_until,
// reclaims until a lease length has been bounded, and any reclaim by a
// relay whose lease is longer than the shortest observed bound.

// liveLease is a lease seen live at a sample.
type liveLease struct {
	id            string
	lease, expiry int64
}

func (l liveLease) key() string { return leaseKey(l.id, l.lease) }

// leaseFate is what LeaseFateQuery read of a row whose lease was live at
// the last sample.
type leaseFate struct {
	class       int
	claimed     bool
	publishedAt *int64
	lease       *int64
}

// liveLeases are the live leases of the last sample and what the sampler
// learned of the lease length.
type liveLeases struct {
	started bool
	at      int64 // database time of the sample that read them
	full    bool  // that read hit outboxsql.MaxLiveLeases
	byKey   map[string]liveLease
	// lengthBound bounds from above the lease length of lease_until
	// relays, in microseconds; 0 while unknown.
	lengthBound int64
}

// toJudge returns the ids of the rows whose lease was live at the last
// sample, has expired by now, and is neither live now nor among the
// expired leases read now: the rows judge needs the fate of.
func (l *liveLeases) toJudge(now int64, live []liveLease, expired []Mark) []string {
	cur := make(map[string]bool, len(live)+len(expired))
	for _, x := range live {
		cur[x.key()] = true
	}
	for _, m := range expired {
		cur[m.Key] = true
	}
	seen := map[string]bool{}
	var out []string
	for k, x := range l.byKey {
		if cur[k] || x.expiry > now || seen[x.id] {
			continue
		}
		seen[x.id] = true
		out = append(out, x.id)
	}
	return out
}

// judge returns how many of the last sample's live leases expired before
// now and moved on, by the rules above, given this sample's live leases,
// the expired leases it read (handled by the lease watermark) and the
// fates of the remembered rows; then it remembers this sample's live
// leases. untilStyle: leases are lease_until values, else claimed_at.
func (l *liveLeases) judge(now int64, live []liveLease, expired []Mark, fates map[string]leaseFate, untilStyle bool) int {
	cur := make(map[string]liveLease, len(live))
	for _, x := range live {
		cur[x.key()] = x
	}
	if untilStyle && l.started && !l.full {
		// A lease live now that was not live at the last sample was
		// claimed after it: its length is below lease - last sample.
		for k, x := range cur {
			if _, ok := l.byKey[k]; ok {
				continue
			}
			if b := x.lease - l.at; b > 0 && (l.lengthBound == 0 || b < l.lengthBound) {
				l.lengthBound = b
			}
		}
	}
	held := make(map[string]bool, len(expired))
	for _, m := range expired {
		held[m.Key] = true
	}
	n := 0
	for k, x := range l.byKey {
		if _, still := cur[k]; still || held[k] || x.expiry > now {
			continue
		}
		if f, ok := fates[x.id]; ok && movedOnAfterExpiry(f, x, untilStyle, l.lengthBound) {
			n++
		}
	}
	l.started, l.at, l.full, l.byKey = true, now, len(live) >= outboxsql.MaxLiveLeases, cur
	return n
}

// movedOnAfterExpiry decides from a row's fate whether lease x had
// expired before the row left it.
func movedOnAfterExpiry(f leaseFate, x liveLease, untilStyle bool, lengthBound int64) bool {
	switch {
	case f.class == outboxsql.FatePublished:
		return f.publishedAt != nil && *f.publishedAt > x.expiry
	case f.class == outboxsql.FateUnpublished && f.claimed && f.lease != nil && *f.lease != x.lease:
		if !untilStyle {
			return *f.lease > x.expiry
		}
		return lengthBound > 0 && *f.lease-lengthBound > x.expiry
	}
	return false
}
