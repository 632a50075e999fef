package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

// Sample is one row of the soak table: the exporter (a child process)
// and, for comparison, the soak process that runs the demo pipeline.
type Sample struct {
	Elapsed time.Duration

	// The exporter process.
	RSS        int64   // VmRSS of the child, bytes
	HeapInuse  float64 // go_memstats_heap_inuse_bytes from its last scrape
	Goroutines float64 // go_goroutines from its last scrape
	Sessions   int     // pg_stat_activity rows with application_name outbox_exporter
	Scrapes    int     // scrapes since the previous sample
	ScrapeFail int     // of those, failed or not 200
	ScrapeMean time.Duration
	ScrapeMax  time.Duration
	Failing    int // collector_success series at 0 in the last scrape
	APIFail    int // GETs of / and /api/v1/* since the previous sample that failed
	APICalls   int

	// The soak process itself: the demo pipeline (writers, relays,
	// consumers, kfake) and the scraper.
	DemoRSS        int64
	DemoHeap       uint64
	DemoGoroutines int
}

// parseVmRSS reads VmRSS from a /proc/PID/status file, in bytes.
func parseVmRSS(status string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("parse VmRSS line %q", line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse VmRSS line %q: %w", line, err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("no VmRSS line in status")
}

// Exposition holds the parts of one /metrics answer the soak watches.
type Exposition struct {
	Goroutines float64
	HeapInuse  float64
	// Failing counts outbox_exporter_collector_success series at 0.
	Failing int
	// FailingNames lists their label sets.
	FailingNames []string
}

// parseExposition reads the Prometheus text format for the few series
// the soak reports. A missing go_goroutines is an error: it means the
// answer is not the exporter's.
func parseExposition(r io.Reader) (Exposition, error) {
	var e Exposition
	seen := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, ok := splitSeries(line)
		if !ok {
			continue
		}
		switch name {
		case "go_goroutines":
			e.Goroutines, seen = value, true
		case "go_memstats_heap_inuse_bytes":
			e.HeapInuse = value
		case vocab.CollectorSuccess:
			if value == 0 {
				e.Failing++
				e.FailingNames = append(e.FailingNames, labels)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return e, fmt.Errorf("read exposition: %w", err)
	}
	if !seen {
		return e, fmt.Errorf("no go_goroutines in the exposition")
	}
	return e, nil
}

// splitSeries splits `name{labels} value [timestamp]`.
func splitSeries(line string) (name, labels string, value float64, ok bool) {
	rest := line
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", "", 0, false
		}
		name, labels, rest = line[:i], line[i+1:j], line[j+1:]
	} else {
		sp := strings.IndexByte(line, ' ')
		if sp < 0 {
			return "", "", 0, false
		}
		name, rest = line[:sp], line[sp:]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", "", 0, false
	}
	return name, labels, v, true
}

// Verdict compares the sample at the end of the warm-up with the last.
type Verdict struct {
	Base, End           Sample
	RSSRatio            float64
	HeapRatio           float64
	GoroutineRatio      float64
	SessionsMax         int
	MaxSessionsAllowed  int
	Flat                bool
	Reasons             []string
	ScrapeFail, Scrapes int
	APIFail, APICalls   int
	// Half is the first sample at or after half the run: the growth over
	// the second half, once every window the exporter keeps (the audit's
	// 10 minutes) has filled.
	Half                              Sample
	HalfRSS, HalfHeap, HalfGoroutines float64
}

// Thresholds for a flat run: resident memory may move by GC and page
// reuse, goroutines by the odd in-flight request.
const (
	maxRSSRatio       = 1.15
	maxGoroutineRatio = 1.10
	goroutineSlack    = 3
)

// judge picks the first sample at or after warmup as the base and the
// last as the end, and says whether RSS and goroutines stayed flat and
// the exporter never held more sessions than its max_connections.
func judge(samples []Sample, warmup time.Duration, maxConns int) (Verdict, error) {
	if len(samples) < 2 {
		return Verdict{}, fmt.Errorf("need at least 2 samples, have %d", len(samples))
	}
	bi := -1
	for i, s := range samples {
		if s.Elapsed >= warmup {
			bi = i
			break
		}
	}
	if bi < 0 || bi == len(samples)-1 {
		return Verdict{}, fmt.Errorf("no sample after the %s warm-up to compare with the end", warmup)
	}
	v := Verdict{Base: samples[bi], End: samples[len(samples)-1], MaxSessionsAllowed: maxConns, Flat: true}
	v.RSSRatio = ratio(float64(v.End.RSS), float64(v.Base.RSS))
	v.HeapRatio = ratio(v.End.HeapInuse, v.Base.HeapInuse)
	v.GoroutineRatio = ratio(v.End.Goroutines, v.Base.Goroutines)
	half := v.End.Elapsed / 2
	for _, s := range samples {
		if s.Elapsed >= half {
			v.Half = s
			break
		}
	}
	v.HalfRSS = ratio(float64(v.End.RSS), float64(v.Half.RSS))
	v.HalfHeap = ratio(v.End.HeapInuse, v.Half.HeapInuse)
	v.HalfGoroutines = ratio(v.End.Goroutines, v.Half.Goroutines)
	for _, s := range samples {
		v.SessionsMax = max(v.SessionsMax, s.Sessions)
		v.Scrapes += s.Scrapes
		v.ScrapeFail += s.ScrapeFail
		v.APICalls += s.APICalls
		v.APIFail += s.APIFail
	}
	if v.RSSRatio > maxRSSRatio {
		v.Flat = false
		v.Reasons = append(v.Reasons, fmt.Sprintf("RSS grew %.2fx (> %.2fx)", v.RSSRatio, maxRSSRatio))
	}
	if v.GoroutineRatio > maxGoroutineRatio && v.End.Goroutines-v.Base.Goroutines > goroutineSlack {
		v.Flat = false
		v.Reasons = append(v.Reasons, fmt.Sprintf("goroutines grew %.0f -> %.0f (%.2fx)", v.Base.Goroutines, v.End.Goroutines, v.GoroutineRatio))
	}
	if maxConns > 0 && v.SessionsMax > maxConns {
		v.Flat = false
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d exporter sessions seen, max_connections is %d", v.SessionsMax, maxConns))
	}
	return v, nil
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// mib formats bytes as MiB with one decimal.
func mib[T int64 | uint64 | float64](b T) string {
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64)
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
}

// writeTable prints the samples as a markdown table.
func writeTable(w io.Writer, samples []Sample) {
	fmt.Fprintln(w, "| t | exporter RSS MiB | heap in use MiB | goroutines | pg sessions | scrapes (fail) | scrape mean ms | scrape max ms | collectors at 0 | API GETs (fail) | demo RSS MiB | demo heap MiB | demo goroutines |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range samples {
		fmt.Fprintf(w, "| %s | %s | %s | %.0f | %d | %d (%d) | %s | %s | %d | %d (%d) | %s | %s | %d |\n",
			s.Elapsed.Round(time.Second), mib(s.RSS), mib(s.HeapInuse), s.Goroutines, s.Sessions,
			s.Scrapes, s.ScrapeFail, ms(s.ScrapeMean), ms(s.ScrapeMax), s.Failing, s.APICalls, s.APIFail,
			mib(s.DemoRSS), mib(s.DemoHeap), s.DemoGoroutines)
	}
}

// writeVerdict prints the growth ratios and the verdict.
func writeVerdict(w io.Writer, v Verdict) {
	fmt.Fprintf(w, "\nGrowth of the exporter from t=%s to t=%s (end / base):\n\n", v.Base.Elapsed.Round(time.Second), v.End.Elapsed.Round(time.Second))
	fmt.Fprintln(w, "| | base | end | ratio |")
	fmt.Fprintln(w, "|---|---|---|---|")
	fmt.Fprintf(w, "| RSS MiB | %s | %s | %.3f |\n", mib(v.Base.RSS), mib(v.End.RSS), v.RSSRatio)
	fmt.Fprintf(w, "| heap in use MiB | %s | %s | %.3f |\n", mib(v.Base.HeapInuse), mib(v.End.HeapInuse), v.HeapRatio)
	fmt.Fprintf(w, "| goroutines | %.0f | %.0f | %.3f |\n", v.Base.Goroutines, v.End.Goroutines, v.GoroutineRatio)
	fmt.Fprintf(w, "\nOver the second half (t=%s to t=%s): RSS %.3f, heap in use %.3f, goroutines %.3f.\n",
		v.Half.Elapsed.Round(time.Second), v.End.Elapsed.Round(time.Second), v.HalfRSS, v.HalfHeap, v.HalfGoroutines)
	fmt.Fprintf(w, "\nMost exporter sessions seen: %d (max_connections %d). Scrapes: %d, failed %d. API GETs: %d, failed %d.\n",
		v.SessionsMax, v.MaxSessionsAllowed, v.Scrapes, v.ScrapeFail, v.APICalls, v.APIFail)
	if v.Flat {
		fmt.Fprintf(w, "VERDICT: FLAT (RSS ratio <= %.2f, goroutine ratio <= %.2f or within %d, sessions <= max_connections)\n", maxRSSRatio, maxGoroutineRatio, goroutineSlack)
	} else {
		fmt.Fprintf(w, "VERDICT: NOT FLAT: %s\n", strings.Join(v.Reasons, "; "))
	}
}
