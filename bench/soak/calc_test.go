package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseVmRSS(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     int64
		err      bool
	}{
		{"status", "Name:\tx\nVmPeak:\t  9 kB\nVmRSS:\t   31744 kB\nRssAnon:\t1 kB\n", 31744 * 1024, false},
		{"missing", "Name:\tx\n", 0, true},
		{"bad unit", "VmRSS:\t 12 MB\n", 0, true},
		{"bad number", "VmRSS:\t x kB\n", 0, true},
	} {
		got, err := parseVmRSS(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%s: got %d, %v; want %d, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestParseExposition(t *testing.T) {
	e, err := parseExposition(strings.NewReader(`# HELP go_goroutines x
# TYPE go_goroutines gauge
go_goroutines 24
go_memstats_heap_inuse_bytes 5.24288e+06
outbox_exporter_collector_success{collector="outbox",target="messages"} 1
outbox_exporter_collector_success{collector="kafka",target="demo"} 0
outbox_events{outbox="m",state="pending",event_type="a{b} c"} 3
`))
	if err != nil {
		t.Fatal(err)
	}
	if e.Goroutines != 24 || e.HeapInuse != 5242880 || e.Failing != 1 || e.FailingNames[0] != `collector="kafka",target="demo"` {
		t.Errorf("got %+v", e)
	}
	if _, err := parseExposition(strings.NewReader("up 1\n")); err == nil {
		t.Error("no go_goroutines: want an error")
	}
}

func TestJudge(t *testing.T) {
	s := func(min int, rssMiB int64, g float64, sessions int) Sample {
		return Sample{Elapsed: time.Duration(min) * time.Minute, RSS: rssMiB << 20, HeapInuse: 1, Goroutines: g, Sessions: sessions}
	}
	for _, tc := range []struct {
		name    string
		samples []Sample
		flat    bool
		base    time.Duration
		err     bool
	}{
		{"flat after warm-up growth", []Sample{s(1, 20, 20, 1), s(5, 30, 24, 1), s(30, 33, 25, 2)}, true, 5 * time.Minute, false},
		{"rss grows", []Sample{s(5, 30, 24, 1), s(30, 40, 24, 1)}, false, 5 * time.Minute, false},
		{"goroutines grow", []Sample{s(5, 30, 24, 1), s(30, 30, 40, 1)}, false, 5 * time.Minute, false},
		{"a few goroutines more is slack", []Sample{s(5, 30, 10, 1), s(30, 30, 13, 1)}, true, 5 * time.Minute, false},
		{"sessions over max_connections", []Sample{s(5, 30, 24, 4), s(30, 30, 24, 1)}, false, 5 * time.Minute, false},
		{"base is the first sample at or after the warm-up", []Sample{s(4, 10, 24, 1), s(6, 30, 24, 1), s(30, 30, 24, 1)}, true, 6 * time.Minute, false},
		{"no sample after the warm-up", []Sample{s(1, 30, 24, 1), s(5, 30, 24, 1)}, false, 0, true},
		{"one sample", []Sample{s(5, 30, 24, 1)}, false, 0, true},
	} {
		v, err := judge(tc.samples, 5*time.Minute, 3)
		if (err != nil) != tc.err {
			t.Errorf("%s: error %v, want error %v", tc.name, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		if v.Flat != tc.flat || v.Base.Elapsed != tc.base {
			t.Errorf("%s: flat %v base %s (%v); want flat %v base %s", tc.name, v.Flat, v.Base.Elapsed, v.Reasons, tc.flat, tc.base)
		}
	}
}

func TestJudgeSecondHalf(t *testing.T) {
	ss := []Sample{
		{Elapsed: 5 * time.Minute, RSS: 20, HeapInuse: 2, Goroutines: 20},
		{Elapsed: 14 * time.Minute, RSS: 30, HeapInuse: 4, Goroutines: 20},
		{Elapsed: 16 * time.Minute, RSS: 32, HeapInuse: 4, Goroutines: 20},
		{Elapsed: 30 * time.Minute, RSS: 32, HeapInuse: 5, Goroutines: 22},
	}
	v, err := judge(ss, 5*time.Minute, 3)
	if err != nil {
		t.Fatal(err)
	}
	if v.Half.Elapsed != 16*time.Minute || v.HalfRSS != 1 || v.HalfHeap != 1.25 || v.HalfGoroutines != 1.1 {
		t.Errorf("second half from %s: RSS %v heap %v goroutines %v; want from 16m: 1, 1.25, 1.1", v.Half.Elapsed, v.HalfRSS, v.HalfHeap, v.HalfGoroutines)
	}
	if v.RSSRatio != 1.6 || v.Flat {
		t.Errorf("from the warm-up: RSS %v flat %v; want 1.6, not flat", v.RSSRatio, v.Flat)
	}
}
