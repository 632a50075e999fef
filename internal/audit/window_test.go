package audit

import (
	"fmt"
	"testing"
)

func fpOf(s string) uint64 { _, fp := Digest([]byte(s)); return fp }

func TestWindowAddLookupSealEvict(t *testing.T) {
	const minute = int64(60_000)
	span := 60 * minute // one hour, 1-minute buckets
	now := 1000 * span
	w := newWindow(span, now)
	defer w.free()

	// ids spread over the last hour, one per 10s.
	for i := 0; i < 360; i++ {
		ts := now - span + int64(i)*10_000
		if dup, in := w.add(fpOf(fmt.Sprint("evt-", i)), ts, now); dup || !in {
			t.Fatalf("add %d: dup=%v in=%v", i, dup, in)
		}
	}
	w.advance(now)
	if len(w.sealed) < 55 {
		t.Fatalf("sealed %d buckets, want most of 60", len(w.sealed))
	}
	for i := 0; i < 360; i++ {
		end, ok := w.lookup(fpOf(fmt.Sprint("evt-", i)))
		ts := now - span + int64(i)*10_000
		if !ok {
			t.Fatalf("evt-%d not found", i)
		}
		if end <= ts || end > ts+minute {
			t.Fatalf("evt-%d: bucket end %d not within a bucket after %d", i, end, ts)
		}
	}
	if _, ok := w.lookup(fpOf("absent")); ok {
		t.Fatal("absent id found")
	}
	// A second copy is a duplicate, wherever it lands.
	if dup, _ := w.add(fpOf("evt-5"), now, now); !dup {
		t.Fatal("second copy of a sealed id not reported as duplicate")
	}
	if dup, _ := w.add(fpOf("evt-359"), now, now); !dup {
		t.Fatal("second copy of an open id not reported as duplicate")
	}
	// Records older than the window are not kept.
	if _, in := w.add(fpOf("old"), now-span-1, now); in {
		t.Fatal("record older than the window kept")
	}
	// Half an hour later the first half has left the window.
	later := now + span/2
	w.advance(later)
	for i := 0; i < 360; i++ {
		ts := now - span + int64(i)*10_000
		_, ok := w.lookup(fpOf(fmt.Sprint("evt-", i)))
		evicted := ts < later-span-minute
		kept := ts >= later-span
		if evicted && ok && i != 5 {
			t.Errorf("evt-%d (ts %d) still held past the window", i, ts)
		}
		if kept && !ok {
			t.Errorf("evt-%d (ts %d) evicted inside the window", i, ts)
		}
	}
	// evt-5's second copy keeps it.
	if _, ok := w.lookup(fpOf("evt-5")); !ok {
		t.Error("evt-5's later copy was evicted")
	}
	// Two hours later nothing is left.
	w.advance(now + 2*span + 2*minute)
	if s := w.stats(); s.IDs != 0 || s.Buckets != 0 {
		t.Errorf("after two windows: %+v, want empty", s)
	}
}

func TestWindowLateRecordsGoToOpenBucket(t *testing.T) {
	span := int64(3_600_000)
	now := 100 * span
	w := newWindow(span, now)
	defer w.free()
	w.add(fpOf("a"), now-1000, now)
	w.advance(now)
	// A record for a bucket long sealed (another partition lagging).
	late := now - span/2
	if _, in := w.add(fpOf("late"), late, now); !in {
		t.Fatal("late record inside the window dropped")
	}
	end, ok := w.lookup(fpOf("late"))
	if !ok || end < late {
		t.Fatalf("late record: end %d ok %v", end, ok)
	}
	w.advance(now + 5*60_000)
	if _, ok := w.lookup(fpOf("late")); !ok {
		t.Fatal("late record lost when sealed")
	}
}

func TestSealedBucketEntries(t *testing.T) {
	set := map[uint64]struct{}{}
	for i := 0; i < 20000; i++ {
		set[fpOf(fmt.Sprint(i))] = struct{}{}
	}
	// Fingerprints at the edges of the prefix and stored ranges.
	edges := []uint64{0, 1, storedMask, 1 << storedBits, 1<<60 - 1}
	for _, e := range edges {
		set[e] = struct{}{}
	}
	b := seal(7, set)
	defer freeSlab(b.data)
	if b.len() != len(set) {
		t.Fatalf("len %d, want %d", b.len(), len(set))
	}
	for fp := range set {
		if !b.has(fp) {
			t.Fatalf("%x missing", fp)
		}
	}
	for i := 20000; i < 40000; i++ {
		if b.has(fpOf(fmt.Sprint(i))) {
			t.Fatalf("%d found but never added", i)
		}
	}
}
