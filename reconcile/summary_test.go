package reconcile

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestBucketsCoverRange: buckets tile [lo, hi] exactly, in order, none
// wider than asked, without overflowing at the ends of int64.
func TestBucketsCoverRange(t *testing.T) {
	cases := []struct {
		lo, hi int64
		width  uint64
	}{
		{1, 1, 1},
		{1, 10, 3},
		{-5, 5, 2},
		{math.MinInt64, math.MaxInt64, maxChunkWidth},
		{math.MaxInt64 - 10, math.MaxInt64, 4},
		{math.MinInt64, math.MinInt64 + 10, 4},
	}
	for range 200 {
		lo := rand.Int64() - math.MaxInt64/2
		cases = append(cases, struct {
			lo, hi int64
			width  uint64
		}{lo, lo + rand.Int64N(1<<40), 1 + rand.Uint64N(1<<30)})
	}
	for _, c := range cases {
		bs := buckets(c.lo, c.hi, c.width)
		if bs[0].lo != c.lo || bs[len(bs)-1].hi != c.hi {
			t.Fatalf("buckets(%d, %d, %d) span %d..%d", c.lo, c.hi, c.width, bs[0].lo, bs[len(bs)-1].hi)
		}
		for i, b := range bs {
			if b.hi < b.lo || b.width() > c.width {
				t.Fatalf("buckets(%d, %d, %d): bucket %d is %d..%d", c.lo, c.hi, c.width, i, b.lo, b.hi)
			}
			if i > 0 && b.lo != bs[i-1].hi+1 {
				t.Fatalf("buckets(%d, %d, %d): bucket %d starts at %d after %d", c.lo, c.hi, c.width, i, b.lo, bs[i-1].hi)
			}
		}
	}
}

// TestBucketWidth: about leafRows rows a bucket at the density given, at
// most maxBuckets buckets, at least one key wide.
func TestBucketWidth(t *testing.T) {
	for _, c := range []struct {
		span    uint64
		density float64
		leaf    int
		want    uint64
	}{
		{10_000, 1, 1000, 1000},
		{10_000, 0.5, 1000, 2000},
		{10_000, 0, 1000, 10_000},
		{3, 1, 2, 2},
		{1 << 40, 1, 2048, (1 << 40) / maxBuckets},
		{100, 5, 1, 1},
	} {
		if got := bucketWidth(c.span, c.density, c.leaf); got != c.want {
			t.Errorf("bucketWidth(%d, %g, %d) = %d, want %d", c.span, c.density, c.leaf, got, c.want)
		}
	}
}

// TestNextWidth: chunks follow chunk_time, at most doubling or halving,
// capped by the rows maxBuckets buckets hold at the density seen.
func TestNextWidth(t *testing.T) {
	r := &summarised{r: &runner{chunkTime: 100 * time.Millisecond, leafRows: 10, minRows: 5}, bucketRows: 10}
	for _, c := range []struct {
		width   uint64
		took    time.Duration
		density float64
		want    uint64
	}{
		{1000, 10 * time.Millisecond, 0.001, 2000},
		{1000, 100 * time.Millisecond, 0.001, 1000},
		{1000, time.Second, 0.001, 500},
		{1000, 0, 1, 2000},
		{100_000, time.Millisecond, 1, maxBuckets * 10},
		{8, time.Second, 1, 5},
		{maxChunkWidth, time.Millisecond, 0, maxChunkWidth},
	} {
		if got := r.nextWidth(c.width, c.took, c.density); got != c.want {
			t.Errorf("nextWidth(%d, %v, %g) = %d, want %d", c.width, c.took, c.density, got, c.want)
		}
	}
}

// TestResizeBuckets: buckets shrink while many differ, down to a
// sixteenth of leafRows, and grow back to leafRows when few do.
func TestResizeBuckets(t *testing.T) {
	r := &summarised{r: &runner{leafRows: 1024}, bucketRows: 1024}
	var sizes []int
	for range 6 {
		r.resizeBuckets(rangeStats{nonEmpty: 1000, differs: 200})
		sizes = append(sizes, r.bucketRows)
	}
	r.resizeBuckets(rangeStats{nonEmpty: 1000, differs: 30}) // between: kept
	sizes = append(sizes, r.bucketRows)
	for range 6 {
		r.resizeBuckets(rangeStats{nonEmpty: 1000, differs: 1})
		sizes = append(sizes, r.bucketRows)
	}
	r.resizeBuckets(rangeStats{}) // an empty chunk changes nothing
	sizes = append(sizes, r.bucketRows)
	if got, want := fmt.Sprint(sizes), "[512 256 128 64 64 64 64 128 256 512 1024 1024 1024 1024]"; got != want {
		t.Errorf("bucket rows %s, want %s", got, want)
	}
}

// TestChecksumOutboxKeepsOldVersions: an outbox that keeps the rows of
// earlier versions never equals the authority row for row; its buckets
// are decided by its latest version per key, without reading their rows,
// and a current version without its row is still found.
func TestChecksumOutboxKeepsOldVersions(t *testing.T) {
	p := newPair(t, "bigint")
	for i := 1; i <= 60; i++ {
		v := int64(1 + i%3)
		p.add(t, i, v, old, "PUBLISHED", v)
		for ov := int64(1); ov < v; ov++ {
			p.outbox(t, i, ov, old, "PUBLISHED")
		}
	}
	// Key 30 moved to version 4: its old rows are there, the new one is not.
	p.a.Exec(t, `UPDATE messages SET version = 4 WHERE id = 30`)
	p.b.Exec(t, `UPDATE search_index SET version = 4 WHERE message_id = 30`)
	s := scheduler(t, p.yaml(""), nil)
	s.jobs["search_index"].leafRows = 4
	res, err := s.Run(context.Background(), "search_index", true)
	if err != nil {
		t.Fatal(err)
	}
	sameLines(t, "findings", found(res), []string{"missing_outbox 30"})
	if res.RowsChecked != 60 {
		t.Errorf("checked %d rows, want 60", res.RowsChecked)
	}
	if res.RowsRead > 20 {
		t.Errorf("read %d rows one by one; the latest-version summaries should have decided all but key 30's bucket", res.RowsRead)
	}
}

// TestChecksumExtremeKeys: keys at both ends of int64 and around zero,
// with a gap of each kind among them.
func TestChecksumExtremeKeys(t *testing.T) {
	p := newPair(t, "bigint")
	keys := []int64{math.MinInt64, math.MinInt64 + 1, -1 << 40, -1, 0, 1, 1 << 40, math.MaxInt64 - 1, math.MaxInt64}
	for _, k := range keys {
		p.a.Exec(t, `INSERT INTO messages (id, version, created_at) VALUES ($1, 1, now() - interval '1 day')`, k)
		if k != 0 {
			p.a.Exec(t, `INSERT INTO outbox (message_id, message_version, created_at, status, published_at) VALUES ($1, 1, now() - interval '1 day', 'PUBLISHED', now() - interval '1 day')`, k)
		}
		if k != math.MaxInt64 {
			p.b.Exec(t, `INSERT INTO search_index VALUES ($1, $2)`, k, map[bool]int{true: 2, false: 1}[k == math.MinInt64])
		}
	}
	p.b.Exec(t, `INSERT INTO search_index VALUES ($1, 1)`, int64(-2))
	for _, opts := range [][]Option{nil, {StreamRuns()}} {
		s := scheduler(t, p.yaml(""), nil, opts...)
		res, err := s.Run(context.Background(), "search_index", true)
		if err != nil {
			t.Fatal(err)
		}
		sameLines(t, fmt.Sprintf("findings (stream %v)", opts != nil), found(res), []string{
			"missing_outbox 0",
			"missing_target 9223372036854775807",
			"orphan_target -2",
			"orphan_target -9223372036854775808",
		})
		if res.RowsChecked != int64(len(keys)) {
			t.Errorf("checked %d rows, want %d", res.RowsChecked, len(keys))
		}
	}
}

// TestUUIDPositions: uuid positions keep uuid order, and the keys at a
// position's ends bound every uuid at that position.
func TestUUIDPositions(t *testing.T) {
	r := &runner{kt: keyUUID}
	uuid := func() key {
		var b [16]byte
		for i := range b {
			b[i] = byte(rand.IntN(256))
		}
		if rand.IntN(4) == 0 {
			b[0] = 0xff * byte(rand.IntN(2)) // the ends of the space
		}
		return key{s: formatUUID(b[:])}
	}
	for range 2000 {
		a, b := uuid(), uuid()
		pa, err := r.position(a)
		if err != nil {
			t.Fatal(err)
		}
		pb, err := r.position(b)
		if err != nil {
			t.Fatal(err)
		}
		if (a.s < b.s && pa > pb) || (a.s > b.s && pa < pb) {
			t.Fatalf("%s < %s but positions %d, %d", a.s, b.s, pa, pb)
		}
		lo, hi := r.keyAt(pa, true), r.keyAt(pa, false)
		if lo.s > a.s || hi.s < a.s {
			t.Fatalf("%s at position %d is outside %s..%s", a.s, pa, lo.s, hi.s)
		}
		if back, _ := r.position(lo); back != pa {
			t.Fatalf("position of %s is %d, want %d", lo.s, back, pa)
		}
	}
	if _, err := r.position(key{s: "not-a-uuid"}); err == nil {
		t.Error("position of a malformed uuid: no error")
	}
}

// TestChecksumTargetRebuilt: a target that lost most of its rows differs
// in nearly every bucket; adjacent buckets are read together, a streamed
// chunk's rows at a time, not one query pair each.
func TestChecksumTargetRebuilt(t *testing.T) {
	p := newPair(t, "bigint")
	for i := 1; i <= 120; i++ {
		tv := int64(0)
		if i%40 == 0 {
			tv = 1
		}
		p.add(t, i, 1, old, "PUBLISHED", tv)
	}
	s := scheduler(t, p.yaml(""), nil)
	s.jobs["search_index"].maxRows = 30
	res, err := s.Run(context.Background(), "search_index", true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Gaps[MissingTarget] != 117 || res.TotalGaps() != 117 {
		t.Errorf("gaps %v, want 117 missing_target", res.Gaps)
	}
	// 120 rows, read at most 30 at a time, with chunk and bucket ends
	// between them: well under the 60 ranges of 2 rows the buckets are.
	if res.RangesRead > 20 || res.RangesRead < 4 {
		t.Errorf("read %d ranges row by row; want adjacent buckets read together, at most 30 rows each", res.RangesRead)
	}
	t.Logf("%d ranges read row by row, %d rows, over %d chunks", res.RangesRead, res.RowsRead, res.Chunks)
}
