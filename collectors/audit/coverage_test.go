package audit

import "testing"

// TestPartitionCover is the coverage rule of coverage.go, case by case.
func TestPartitionCover(t *testing.T) {
	const from, start = 1_000, 4_600
	del := topicPolicy{tombstoneLag: 86_400_000}
	compact := topicPolicy{compacted: true, compactLag: 600, tombstoneLag: 86_400_000}
	for _, tt := range []struct {
		name      string
		l         partitionListing
		p         topicPolicy
		idInKey   bool
		cover     int64
		fromFirst bool
	}{
		{"never trimmed", partitionListing{logStart: 0, atFrom: 0, end: 10}, del, false, from, false},
		{"trimmed before the window", partitionListing{logStart: 5, atFrom: 8, end: 10}, del, false, from, false},
		{"nothing in the window, old records kept", partitionListing{logStart: 5, atFrom: 10, end: 10}, del, false, from, false},
		{"trimmed inside the window", partitionListing{logStart: 5, atFrom: 5, end: 10}, del, false, from, true},
		{"every record deleted", partitionListing{logStart: 10, atFrom: 10, end: 10}, del, false, start, false},
		{"compacted, id in a header", partitionListing{end: 10}, compact, false, start - 600, false},
		{"compacted, id in the key", partitionListing{end: 10}, compact, true, from, false},
		{"compacted and trimmed", partitionListing{logStart: 5, atFrom: 5, end: 10}, compact, false, start - 600, true},
		// Seed 20040: a compaction gap at the log start; the offset before
		// the window's first record is not there to prove it complete.
		{"compacted, log start past 0", partitionListing{logStart: 4, atFrom: 5, end: 10}, compact, true, from, true},
		{"compacted, log start past 0, nothing in the window", partitionListing{logStart: 4, atFrom: 10, end: 10}, compact, true, start, false},
		{"compacted, never trimmed", partitionListing{logStart: 0, atFrom: 5, end: 10}, compact, true, from, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cover, first := partitionCover(tt.l, tt.p, tt.idInKey, from, start)
			if cover != tt.cover || first != tt.fromFirst {
				t.Errorf("partitionCover = %d, %v; want %d, %v", cover, first, tt.cover, tt.fromFirst)
			}
		})
	}
}
