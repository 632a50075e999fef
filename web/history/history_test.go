package history

import (
	"fmt"
	"testing"
	"time"
)

func TestBoundedPointsAndSteps(t *testing.T) {
	s := New(time.Minute, 10*time.Second, 10)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 100; i++ {
		s.Add("a", t0.Add(time.Duration(i)*5*time.Second), float64(i))
	}
	got := s.Get("a", t0.Add(99*5*time.Second))
	if len(got) > 6 {
		t.Fatalf("kept %d points, want at most 6 (1m at 10s)", len(got))
	}
	if last := got[len(got)-1]; last.V != 99 {
		t.Errorf("last point %v, want the newest sample 99", last)
	}
	for i := 1; i < len(got); i++ {
		if !got[i].T.After(got[i-1].T) {
			t.Errorf("points out of order: %v", got)
		}
	}
}

func TestMaxSeriesAndEviction(t *testing.T) {
	s := New(time.Minute, 10*time.Second, 3)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 5; i++ {
		s.Add(fmt.Sprint(i), t0, 1)
	}
	if n := len(s.Keys()); n != 3 {
		t.Fatalf("%d series, want the cap of 3", n)
	}
	// Once the old series fall out of the window, new ones are admitted.
	s.Add("new", t0.Add(2*time.Minute), 1)
	if got := s.Get("new", t0.Add(2*time.Minute)); len(got) != 1 {
		t.Fatalf("new series not admitted after eviction: %v", s.Keys())
	}
}
