// Package history keeps a bounded, in-memory recent history of a few
// series (oldest pending age per outbox, lag seconds per consumer group)
// for the trends on the on-call page.
//
// Each series holds at most Points samples, one per Step (later samples in
// the same step replace the earlier one), so a series costs about
// Points*16 bytes: 240 points (1 hour at 15 s) is under 4 KB. At most
// MaxSeries series are kept; new keys beyond that are dropped, and a series
// not updated for a whole window is forgotten.
package history

import (
	"sort"
	"sync"
	"time"
)

// Point is one sample.
type Point struct {
	T time.Time
	V float64
}

// Store is a set of bounded series. It is safe for concurrent use.
type Store struct {
	Step      time.Duration
	Points    int
	MaxSeries int

	mu     sync.Mutex
	series map[string][]Point
	// evicted is the step of the last eviction scan: a full store scans
	// once per step, not once per new key (that was keys x MaxSeries per
	// scrape with more groups than MaxSeries).
	evicted time.Time
}

// New returns a store of window/step points per series.
func New(window, step time.Duration, maxSeries int) *Store {
	return &Store{Step: step, Points: int(window / step), MaxSeries: maxSeries, series: map[string][]Point{}}
}

// Add records v for key at t.
func (s *Store) Add(key string, t time.Time, v float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pts, ok := s.series[key]
	if !ok && len(s.series) >= s.MaxSeries {
		if step := t.Truncate(s.Step); step.After(s.evicted) {
			s.evicted = step
			s.evictLocked(t)
		}
		if len(s.series) >= s.MaxSeries {
			return
		}
	}
	bucket := t.Truncate(s.Step)
	if n := len(pts); n > 0 && !pts[n-1].T.Truncate(s.Step).Before(bucket) {
		pts[n-1] = Point{t, v}
	} else {
		pts = append(pts, Point{t, v})
	}
	if len(pts) > s.Points {
		pts = append(pts[:0], pts[len(pts)-s.Points:]...)
	}
	s.series[key] = pts
}

// evictLocked forgets series with no sample within the window.
func (s *Store) evictLocked(now time.Time) {
	horizon := now.Add(-time.Duration(s.Points) * s.Step)
	for k, pts := range s.series {
		if len(pts) == 0 || pts[len(pts)-1].T.Before(horizon) {
			delete(s.series, k)
		}
	}
}

// Get returns a copy of key's samples within the window before now, oldest first.
func (s *Store) Get(key string, now time.Time) []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	horizon := now.Add(-time.Duration(s.Points) * s.Step)
	var out []Point
	for _, p := range s.series[key] {
		if !p.T.Before(horizon) {
			out = append(out, p)
		}
	}
	return out
}

// Keys lists the series held, sorted.
func (s *Store) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.series))
	for k := range s.series {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
