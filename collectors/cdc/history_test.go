package cdc

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestParseLSN(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want LSN
	}{{"0/0", 0}, {"16/B374D848", 0x16B374D848}, {"FFFFFFFF/FFFFFFFF", ^LSN(0)}} {
		got, err := ParseLSN(tc.in)
		if err != nil || got != tc.want || got.String() != tc.in {
			t.Errorf("ParseLSN(%q) = %v (%s), %v; want %v", tc.in, uint64(got), got, err, uint64(tc.want))
		}
	}
	for _, bad := range []string{"", "16", "x/1", "1/x", "100000000/0"} {
		if _, err := ParseLSN(bad); err == nil {
			t.Errorf("ParseLSN(%q) took it", bad)
		}
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// trajectory is a server's true WAL position at every millisecond tick:
// pos[t] for t in [0, len). It is what the history only samples.
type trajectory []LSN

func genTrajectory(r *rand.Rand, ticks int) trajectory {
	pos := make(trajectory, ticks)
	cur := LSN(r.IntN(1 << 30))
	for i := range pos {
		switch r.IntN(4) {
		case 0: // idle: nothing written
		case 1:
			cur += LSN(r.IntN(100))
		default:
			cur += LSN(r.IntN(10000))
		}
		if r.IntN(200) == 0 {
			// A long idle stretch.
			for j := 0; j < 50 && i+1 < ticks; j++ {
				pos[i] = cur
				i++
			}
		}
		pos[i] = cur
	}
	return pos
}

// lastAtOrBefore is the oracle: the last tick up to end at which the
// true position was at or before lsn, by looking at every tick; -1 if
// none.
func (tr trajectory) lastAtOrBefore(lsn LSN, end int) int {
	last := -1
	for t := 0; t <= end; t++ {
		if tr[t] <= lsn {
			last = t
		}
	}
	return last
}

// The history, however it samples and evicts, places every position
// within one kept sampling interval of the truth, says lower bound
// exactly when the truth is older than what it kept, and caught up
// exactly when the position is at or past the newest sample. Seeds that
// once found a fault stay in the list.
func TestHistoryAgainstTrajectory(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		ticks := 500 + r.IntN(3000)
		tr := genTrajectory(r, ticks)
		size := 2 + r.IntN(64)
		minGap := time.Duration(r.IntN(3)) * time.Duration(r.IntN(20)) * time.Millisecond
		h := NewHistory(size, minGap)
		tick := r.IntN(10)
		for tick < ticks {
			h.Add(ms(tick), tr[tick])
			checkHistory(t, seed, h, tr, tick, r)
			tick += 1 + r.IntN(40)
		}
	}
}

func checkHistory(t *testing.T, seed uint64, h *History, tr trajectory, now int, r *rand.Rand) {
	t.Helper()
	kept := h.Samples()
	if len(kept) == 0 || len(kept) > len(h.at) {
		t.Fatalf("seed %d: %d samples kept of at most %d", seed, len(kept), len(h.at))
	}
	oldest, newest := kept[0], kept[len(kept)-1]
	if !newest.At.Equal(ms(now)) || newest.LSN != tr[now] {
		t.Fatalf("seed %d: newest sample %v, want the one just added at %d", seed, newest, now)
	}
	for q := 0; q < 5; q++ {
		// Positions the server really held, and some between them.
		lsn := tr[r.IntN(now+1)] + LSN(r.IntN(3))*LSN(r.IntN(5000))
		p, ok := h.When(lsn)
		if !ok {
			t.Fatalf("seed %d: When(%v) on a non-empty history", seed, lsn)
		}
		truth := tr.lastAtOrBefore(lsn, now)
		switch {
		case lsn >= newest.LSN:
			if !p.CaughtUp || p.LowerBound {
				t.Fatalf("seed %d: %v at or past newest %v: got %+v", seed, lsn, newest.LSN, p)
			}
		case lsn < oldest.LSN:
			if !p.LowerBound || !p.At.Equal(oldest.At) {
				t.Fatalf("seed %d: %v before oldest %v: got %+v", seed, lsn, oldest, p)
			}
			if truth >= 0 && ms(truth).After(p.At) {
				t.Fatalf("seed %d: lower bound %v is later than the truth %v", seed, p.At, ms(truth))
			}
		default:
			if p.CaughtUp || p.LowerBound {
				t.Fatalf("seed %d: %v inside the history: got %+v", seed, lsn, p)
			}
			// The truth is the last tick at or before lsn; the position
			// holds until the next tick, so the server left lsn within
			// (truth, truth+1ms].
			// The answer errs early (towards pending) by at most one
			// kept interval.
			lo := ms(truth)
			if p.At.After(lo) || p.At.Before(lo.Add(-p.Resolution)) {
				t.Fatalf("seed %d: When(%v) = %v, resolution %v; the truth is %v: not within one interval before it", seed, lsn, p.At, p.Resolution, lo)
			}
			// And the answer lies between the two kept samples around lsn,
			// found by looking at every kept sample.
			a := 0
			for i, s := range kept {
				if s.LSN <= lsn {
					a = i
				}
			}
			sa, sb := kept[a], kept[a+1]
			if p.Resolution != sb.At.Sub(sa.At) || p.At.Before(sa.At) || p.At.After(sb.At) {
				t.Fatalf("seed %d: When(%v) = %+v; kept samples around it %v, %v", seed, lsn, p, sa, sb)
			}
			if !p.At.Equal(sa.At) {
				t.Fatalf("seed %d: When(%v) = %v, want the earlier kept sample %v", seed, lsn, p.At, sa.At)
			}
		}
	}
}

// An idle server keeps one sample, with the latest time: the slot's lag
// counts from when the position moved on, not from when it first got
// there.
func TestHistoryIdleKeepsLatest(t *testing.T) {
	h := NewHistory(8, 0)
	h.Add(ms(0), 100)
	for i := 1; i <= 100; i++ {
		h.Add(ms(i*1000), 200)
	}
	h.Add(ms(101000), 300)
	if got := h.Len(); got != 3 {
		t.Fatalf("kept %d samples, want 3: %v", got, h.Samples())
	}
	p, _ := h.When(200)
	if !p.At.Equal(ms(100000)) {
		t.Errorf("When(200) = %v, want the last time the position was 200, %v", p.At, ms(100000))
	}
	p, _ = h.When(250)
	if !p.At.Equal(ms(100000)) || p.Resolution != time.Second {
		t.Errorf("When(250) = %+v, want the start of the last second, when the server was last before it", p)
	}
}

// A position behind the newest means another server: the history starts
// again rather than mix the two.
func TestHistoryResetsOnRewind(t *testing.T) {
	h := NewHistory(8, 0)
	h.Add(ms(0), 1000)
	h.Add(ms(1000), 2000)
	h.Add(ms(2000), 500)
	if s := h.Samples(); len(s) != 1 || s[0].LSN != 500 {
		t.Fatalf("after a rewind: %v", s)
	}
	// And a sample older than the newest is dropped.
	h.Add(ms(1500), 600)
	if s := h.Samples(); len(s) != 1 {
		t.Fatalf("out-of-order sample kept: %v", s)
	}
}

// A burst of collections closer than minGap replaces the newest sample
// instead of spending the history's capacity.
func TestHistoryMinGap(t *testing.T) {
	h := NewHistory(4, time.Second)
	for i := 0; i < 100; i++ {
		h.Add(ms(i*10), LSN(i))
	}
	s := h.Samples()
	if len(s) != 2 || s[0].LSN != 0 || s[1].LSN != 99 {
		t.Fatalf("burst within one second kept %v", s)
	}
}

// Seed puts an older observation (the last checkpoint) in front, and
// only one that fits: older and not ahead of the oldest kept.
func TestHistorySeed(t *testing.T) {
	h := NewHistory(4, 0)
	h.Add(ms(10000), 5000)
	h.Seed(ms(2000), 1000)
	p, _ := h.When(500)
	if !p.LowerBound || !p.At.Equal(ms(2000)) {
		t.Fatalf("before the seed: %+v", p)
	}
	p, _ = h.When(3000)
	if p.LowerBound || !p.At.Equal(ms(2000)) || p.Resolution != 8*time.Second {
		t.Fatalf("between seed and sample: %+v, want the seed's time", p)
	}
	h.Seed(ms(1000), 2000) // ahead of the oldest: a different server
	h.Seed(ms(3000), 900)  // later than the oldest
	h.Seed(ms(500), 1000)  // same position, earlier: the kept one says more
	if s := h.Samples(); len(s) != 2 {
		t.Fatalf("seeds that do not fit were kept: %v", s)
	}
}

func TestHistoryEmpty(t *testing.T) {
	if _, ok := NewHistory(4, 0).When(1); ok {
		t.Fatal("an empty history placed a position")
	}
}

// After a start the history holds the last checkpoint and now. A burst of
// WAL just after the checkpoint, the slot confirming most of it, then a
// stall: the slot has been stuck since about the burst. Its lag must not
// read near 0 (linear interpolation put the position near now); it may
// read more than the truth, by at most the interval, never less.
func TestHistoryBurstThenStallAfterStart(t *testing.T) {
	h := NewHistory(8, 0)
	h.Add(ms(100_000), 100_100) // now: the server's position after the stall
	h.Seed(ms(0), 1_000)        // the last checkpoint, before the burst
	// The burst wrote 1,000 to 100,000 within the first second; the slot
	// confirmed 99,000: the server passed it at about 1s.
	const truthAt = 1_000 // ms
	st, err := Assess(Sample{At: ms(100_000), LSN: 100_100}, SlotRow{Name: "s", Exists: true, Type: "logical", ConfirmedFlush: ptrLSN(99_000)}, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if truth := (100_000 - truthAt) / 1000.0; st.LagSeconds < truth || st.LagSeconds > 100 {
		t.Errorf("lag %vs, want between the truth %vs and the interval, 100s", st.LagSeconds, truth)
	}
	if st.ConfirmedAt.After(ms(truthAt)) {
		t.Errorf("confirmed at %v, after the truth %v: rows behind the slot would read published", st.ConfirmedAt, ms(truthAt))
	}
}

func ptrLSN(l LSN) *LSN { return &l }

// A position between the seed (the last checkpoint) and the first
// collection is an upper bound: the interval after the seed is not a
// collection interval. Once a collection lies before it, or the seed is
// evicted or replaced, it is exact again.
func TestHistoryUpperBoundAfterSeed(t *testing.T) {
	h := NewHistory(3, 0)
	h.Add(ms(100_000), 5000)
	h.Seed(ms(0), 1000)
	if p, _ := h.When(3000); !p.UpperBound || p.LowerBound || !p.At.Equal(ms(0)) {
		t.Fatalf("between the seed and the first collection: %+v, want an upper bound at the seed", p)
	}
	h.Add(ms(101_000), 6000)
	if p, _ := h.When(5500); p.UpperBound || p.LowerBound || p.Resolution != time.Second {
		t.Fatalf("between two collections: %+v, want exact to one second", p)
	}
	if p, _ := h.When(3000); !p.UpperBound {
		t.Fatalf("still between the seed and the first collection: %+v", p)
	}
	h.Add(ms(102_000), 7000) // evicts the seed
	if p, _ := h.When(5500); p.UpperBound || p.LowerBound {
		t.Fatalf("after the seed's eviction: %+v", p)
	}
	if p, _ := h.When(3000); !p.LowerBound || p.UpperBound {
		t.Fatalf("behind the history after the seed's eviction: %+v, want a lower bound", p)
	}
	// A seed alone, then a collection at its position: an observation of
	// the collection's own.
	h = NewHistory(3, 0)
	h.Seed(ms(0), 1000)
	h.Add(ms(5000), 1000)
	h.Add(ms(6000), 2000)
	if p, _ := h.When(1500); p.UpperBound || !p.At.Equal(ms(5000)) {
		t.Fatalf("after a collection at the seed's position: %+v", p)
	}
	// A rewind (another server) forgets the seed with everything else.
	h = NewHistory(4, 0)
	h.Add(ms(10_000), 5000)
	h.Seed(ms(0), 1000)
	h.Add(ms(11_000), 100)
	h.Add(ms(12_000), 200)
	if p, _ := h.When(150); p.UpperBound {
		t.Fatalf("after a rewind: %+v", p)
	}
}

// A seed known to a range of time (the last checkpoint: its time in
// whole seconds, taken before its redo position) places a position after
// it at the range's start, never later than the truth, and one behind it
// at the range's end, a lower bound never earlier than the truth.
func TestHistorySeedRange(t *testing.T) {
	h := NewHistory(4, 0)
	h.Add(ms(100_000), 5000)
	h.SeedRange(ms(3000), ms(4000), 1000)
	if p, _ := h.When(2000); !p.UpperBound || !p.At.Equal(ms(3000)) {
		t.Errorf("after the seed: %+v, want an upper bound from the range's start", p)
	}
	if p, _ := h.When(500); !p.LowerBound || !p.At.Equal(ms(4000)) {
		t.Errorf("behind the seed: %+v, want a lower bound from the range's end", p)
	}
	// The range's end is capped at the first collection.
	h = NewHistory(4, 0)
	h.Add(ms(3500), 5000)
	h.SeedRange(ms(3000), ms(4000), 1000)
	if p, _ := h.When(500); !p.LowerBound || !p.At.Equal(ms(3500)) {
		t.Errorf("behind a seed whose range passes the first collection: %+v", p)
	}
}
