package audit

import (
	"fmt"
	"testing"
	"time"
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
	if len(w.sealed) < bucketsPerWindow-2 {
		t.Fatalf("sealed %d buckets, want most of %d", len(w.sealed), bucketsPerWindow)
	}
	for i := 0; i < 360; i++ {
		end, ok := w.lookup(fpOf(fmt.Sprint("evt-", i)))
		ts := now - span + int64(i)*10_000
		if !ok {
			t.Fatalf("evt-%d not found", i)
		}
		if end <= ts || end > ts+w.width {
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
		evicted := ts < later-span-w.width
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
	for _, n := range []int{0, 20000, 300000} {
		set := map[uint64]struct{}{}
		for i := 0; i < n; i++ {
			set[fpOf(fmt.Sprint(i))] = struct{}{}
		}
		// Fingerprints at the edges of the prefix and stored ranges.
		for _, e := range []uint64{0, 1, storedMask, 1 << storedBits, 1<<fpBits - 1} {
			set[e] = struct{}{}
		}
		b := seal(7, set)
		if b.len() != len(set) {
			t.Fatalf("n=%d: len %d, want %d", n, b.len(), len(set))
		}
		if want := prefixBitsFor(len(set)); fpBits-b.shift != want || (n == 300000 && want <= minPrefixBits) {
			t.Fatalf("n=%d: %d prefix bits, want %d", n, fpBits-b.shift, want)
		}
		for fp := range set {
			if !b.has(fp) {
				t.Fatalf("n=%d: %x missing", n, fp)
			}
		}
		for i := n; i < n+20000; i++ {
			if b.has(fpOf(fmt.Sprint(i))) {
				t.Fatalf("n=%d: %d found but never added", n, i)
			}
		}
		freeSlab(b.data)
	}
}

func TestTally(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tl := NewTally(0.5, time.Hour, now)
	defer tl.Close()
	sampled := 0
	for i := 0; i < 1000; i++ {
		id := []byte(fmt.Sprint("t-", i))
		s, dup := tl.Add(id, now, now)
		if dup {
			t.Fatalf("%s: first copy a duplicate", id)
		}
		if s {
			sampled++
			if s2, dup := tl.Add(id, now, now); !s2 || !dup {
				t.Fatalf("%s: second copy sampled=%v dup=%v", id, s2, dup)
			}
		}
	}
	tl.Advance(now.Add(3 * time.Minute))
	if ids, _ := tl.Size(); ids != sampled || sampled < 400 || sampled > 600 {
		t.Fatalf("held %d ids, sampled %d", ids, sampled)
	}
	tl.Advance(now.Add(2 * time.Hour))
	if ids, bytes := tl.Size(); ids != 0 || bytes != 0 {
		t.Fatalf("after the window: %d ids, %d bytes", ids, bytes)
	}
}
