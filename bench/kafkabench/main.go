// Command kafkabench measures, with -scrape, the whole HTTP scrape of the
// running exporter against one bare kadm.Lag, on kfake or (-broker kafka)
// Apache Kafka; without it, one collection of the Kafka lag collector
// (time lag included) against one bare kadm.Lag over the same groups, on
// an in-process kfake cluster it seeds itself, and prints a markdown table
// of the ratios.
//
//	go run ./bench/kafkabench -groups 200,1000
//
// Every group consumes one topic of -partitions partitions and lags on
// every partition, at its own offsets. "cold" is the first collection of
// a new collector (every committed offset's record is read) against the
// first kadm.Lag of a new client; "steady" is a collection where no commit
// moved (records come from the cache) against a kadm.Lag on a warm client;
// "moved" is a collection after 10% of the groups committed again.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outbox-exporter/outbox_exporter/collectors/kafka"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
)

func main() {
	var (
		sizes      = flag.String("groups", "200,1000", "comma-separated group counts, one cluster each")
		partitions = flag.Int("partitions", 24, "partitions per topic; every group consumes one topic")
		topics     = flag.Int("topics", 10, "topics the groups are spread over")
		records    = flag.Int("records", 200, "records per partition")
		batch      = flag.Int("batch", 20, "records per produced batch")
		brokers    = flag.Int("brokers", 3, "kfake brokers")
		reps       = flag.Int("reps", 5, "repetitions; medians are reported")
		cpuprofile = flag.String("cpuprofile", "", "write a CPU profile of the whole run (seeding excluded) here")
		serve      = flag.Int("serve-kfake", 0, "internal: run a kfake cluster of this many brokers, print its addresses, exit when stdin closes")
		inProcess  = flag.Bool("in-process", false, "run kfake inside the measured process instead of a child process")
		memprofile = flag.String("memprofile", "", "write an allocation profile of the whole run here")
		scrapeMode = flag.Bool("scrape", false, "measure the whole HTTP /metrics scrape of the running exporter against kadm.Lag")
		broker     = flag.String("broker", "kfake", "with -scrape: kfake (child process) or kafka (Apache Kafka from .cache, a JVM child process)")
	)
	flag.Parse()
	if *serve > 0 {
		serveKfake(*serve)
		return
	}
	sameProcess = *inProcess
	if *memprofile != "" {
		defer func() {
			f, err := os.Create(*memprofile)
			if err != nil {
				fail(err)
			}
			defer f.Close()
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fail(err)
			}
		}()
	}
	if *cpuprofile != "" {
		profile = *cpuprofile
	}
	if *scrapeMode {
		var ns []int
		for _, s := range strings.Split(*sizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				fail(fmt.Errorf("-groups %q: %w", s, err))
			}
			ns = append(ns, n)
		}
		runScrape(*broker, ns, *partitions, *topics, *records, *batch, *brokers, *reps)
		return
	}
	var rows []row
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fail(fmt.Errorf("-groups %q: %w", s, err))
		}
		r, err := run(n, *partitions, *topics, *records, *batch, *brokers, *reps)
		if err != nil {
			fail(err)
		}
		rows = append(rows, r)
	}
	where := "in a child process"
	if sameProcess {
		where = "in the measured process"
	}
	fmt.Printf("\nkfake %s, %d brokers, %d topics x %d partitions, %d records of 100 bytes per partition in batches of %d, every group lagging on every partition at its own offsets; medians of %d runs; Go %s, GOMAXPROCS %d\n\n",
		where, *brokers, *topics, *partitions, *records, *batch, *reps, runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Println("| groups | kadm.Lag cold | collection cold | ratio | kadm.Lag warm | collection steady | ratio | collection, 10% moved | ratio |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %d | %s | %s | %.2fx | %s | %s | %.2fx | %s | %.2fx |\n",
			r.groups, ms(r.lagCold), ms(r.collCold), ratio(r.collCold, r.lagCold),
			ms(r.lagWarm), ms(r.collSteady), ratio(r.collSteady, r.lagWarm),
			ms(r.collMoved), ratio(r.collMoved, r.lagWarm))
	}
	fmt.Println()
	fmt.Println("Fastest of each (less disturbed by other load on the machine):")
	fmt.Println()
	fmt.Println("| groups | kadm.Lag cold | collection cold | ratio | kadm.Lag warm | collection steady | ratio | collection, 10% moved | ratio |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %d | %s | %s | %.2fx | %s | %s | %.2fx | %s | %.2fx |\n",
			r.groups, ms(r.minLagCold), ms(r.minCollCold), ratio(r.minCollCold, r.minLagCold),
			ms(r.minLagWarm), ms(r.minCollSteady), ratio(r.minCollSteady, r.minLagWarm),
			ms(r.minCollMoved), ratio(r.minCollMoved, r.minLagWarm))
	}
	fmt.Println()
	if sameProcess {
		fmt.Println("Process CPU time (user+system, kfake's share included; medians):")
	} else {
		fmt.Println("Process CPU time of the measured process (user+system; kfake runs in a child process; medians):")
	}
	fmt.Println()
	fmt.Println("| groups | kadm.Lag cold | collection cold | ratio | kadm.Lag warm | collection steady | ratio | collection, 10% moved | ratio |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		c := r.cpu
		fmt.Printf("| %d | %s | %s | %.2fx | %s | %s | %.2fx | %s | %.2fx |\n",
			r.groups, ms(c[0]), ms(c[1]), ratio(c[1], c[0]), ms(c[2]), ms(c[3]), ratio(c[3], c[2]), ms(c[4]), ratio(c[4], c[2]))
	}
	fmt.Println()
	if sameProcess {
		fmt.Println("Memory (allocations include the in-process kfake's work for the requests; \"retained\" is the collector's heap between scrapes, its probe cache; \"peak\" is the whole process, kfake's data included):")
	} else {
		fmt.Println("Memory of the measured process (kfake runs in a child process; \"retained\" is the collector's heap between scrapes, its probe cache; \"peak\" is the whole measured process):")
	}
	fmt.Println()
	fmt.Println("| groups | kadm.Lag alloc cold | collection alloc cold | kadm.Lag alloc warm | collection alloc steady | collector retained | peak heap | peak RSS |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %d | %s | %s | %s | %s | %s | %s | %s |\n",
			r.groups, mb(r.lagAllocCold), mb(r.allocCold), mb(r.lagAllocWarm), mb(r.allocSteady), mb(r.retained), mb(r.peakHeap), mb(peakRSS()))
	}
}

// peakRSS returns the process's peak resident set (VmHWM), or 0.
func peakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kafkabench:", err)
	os.Exit(1)
}

type row struct {
	groups                                     int
	lagCold, collCold, lagWarm, collSteady     time.Duration
	minLagCold, minCollCold, minLagWarm        time.Duration
	minCollSteady, minCollMoved                time.Duration
	cpu                                        [5]time.Duration // lag cold, coll cold, lag warm, coll steady, coll moved
	collMoved                                  time.Duration
	allocCold, allocSteady, retained, peakHeap uint64
	lagAllocCold, lagAllocWarm                 uint64
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
func mb(b uint64) string        { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }
func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func median(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func run(groups, partitions, topics, records, batch, brokers, reps int) (row, error) {
	r := row{groups: groups}
	addrs, stop, err := startCluster(brokers)
	if err != nil {
		return r, err
	}
	defer stop()
	k := &config.Kafka{Brokers: addrs, Groups: []string{"/g.*/"}, Deadline: 10 * time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	names, err := seed(ctx, k, groups, partitions, topics, records, batch)
	if err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "seeded %d groups\n", groups)
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return r, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return r, err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var lagCold, collCold, lagWarm, collSteady, collMoved []time.Duration
	var cpuLagCold, cpuCollCold, cpuLagWarm, cpuCollSteady, cpuCollMoved []time.Duration
	for i := 0; i < reps; i++ {
		// Cold: new clients on both sides.
		cl, err := kafkaclient.New(k)
		if err != nil {
			return r, err
		}
		adm := kadm.NewClient(cl)
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		d, err := timeLag(ctx, adm, names)
		if err != nil {
			return r, err
		}
		runtime.ReadMemStats(&ms1)
		r.lagAllocCold = ms1.TotalAlloc - ms0.TotalAlloc
		lagCold = append(lagCold, d)
		cpuLagCold = append(cpuLagCold, lastCPU)

		coll, err := kafka.NewCollector("bench", k, logger)
		if err != nil {
			return r, err
		}
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		d, n, err := timeCollect(ctx, coll)
		if err != nil {
			return r, err
		}
		runtime.ReadMemStats(&ms1)
		r.allocCold = ms1.TotalAlloc - ms0.TotalAlloc
		r.peakHeap = max(r.peakHeap, ms1.HeapAlloc)
		if n < 2*groups {
			return r, fmt.Errorf("collection sent %d series for %d groups", n, groups)
		}
		collCold = append(collCold, d)
		cpuCollCold = append(cpuCollCold, lastCPU)

		// Steady: warm clients, no commit moved.
		for j := 0; j < 3; j++ {
			runtime.ReadMemStats(&ms0)
			d, err := timeLag(ctx, adm, names)
			if err != nil {
				return r, err
			}
			runtime.ReadMemStats(&ms1)
			r.lagAllocWarm = ms1.TotalAlloc - ms0.TotalAlloc
			lagWarm = append(lagWarm, d)
			cpuLagWarm = append(cpuLagWarm, lastCPU)
			runtime.ReadMemStats(&ms0)
			d, _, err = timeCollect(ctx, coll)
			if err != nil {
				return r, err
			}
			runtime.ReadMemStats(&ms1)
			r.allocSteady = ms1.TotalAlloc - ms0.TotalAlloc
			r.peakHeap = max(r.peakHeap, ms1.HeapAlloc)
			collSteady = append(collSteady, d)
			cpuCollSteady = append(cpuCollSteady, lastCPU)
		}

		// 10% of the groups commit again: only their moved offsets are read.
		if err := moveCommits(ctx, cl, names[:max(1, groups/10)], records, i); err != nil {
			return r, err
		}
		d, _, err = timeCollect(ctx, coll)
		if err != nil {
			return r, err
		}
		collMoved = append(collMoved, d)
		cpuCollMoved = append(cpuCollMoved, lastCPU)

		runtime.GC()
		runtime.ReadMemStats(&ms0)
		withCache := ms0.HeapAlloc
		coll.Close()
		coll = nil
		runtime.GC()
		runtime.ReadMemStats(&ms1)
		if withCache > ms1.HeapAlloc {
			r.retained = max(r.retained, withCache-ms1.HeapAlloc)
		}
		cl.Close()
	}
	r.lagCold, r.collCold = median(lagCold), median(collCold)
	r.lagWarm, r.collSteady, r.collMoved = median(lagWarm), median(collSteady), median(collMoved)
	r.minLagCold, r.minCollCold, r.minLagWarm = lagCold[0], collCold[0], lagWarm[0] // sorted by median
	r.minCollSteady, r.minCollMoved = collSteady[0], collMoved[0]
	r.cpu = [5]time.Duration{median(cpuLagCold), median(cpuCollCold), median(cpuLagWarm), median(cpuCollSteady), median(cpuCollMoved)}
	return r, nil
}

// lastCPU is the process CPU time (user+system, kfake's share included)
// the last timed call took: less disturbed by other load than wall time.
var lastCPU time.Duration

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func timeLag(ctx context.Context, adm *kadm.Client, groups []string) (time.Duration, error) {
	c0 := cpuTime()
	start := time.Now()
	lags, err := adm.Lag(ctx, groups...)
	d := time.Since(start)
	lastCPU = cpuTime() - c0
	if err != nil {
		return d, fmt.Errorf("kadm.Lag: %w", err)
	}
	if err := lags.Error(); err != nil {
		return d, fmt.Errorf("kadm.Lag: %w", err)
	}
	if len(lags) != len(groups) {
		return d, fmt.Errorf("kadm.Lag: %d groups, want %d", len(lags), len(groups))
	}
	return d, nil
}

func timeCollect(ctx context.Context, c *kafka.Collector) (time.Duration, int, error) {
	ch := make(chan prometheus.Metric, 1<<14)
	done := make(chan int)
	go func() {
		n := 0
		for range ch {
			n++
		}
		done <- n
	}()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c0 := cpuTime()
	start := time.Now()
	err := c.Update(sctx, ch)
	d := time.Since(start)
	lastCPU = cpuTime() - c0
	close(ch)
	n := <-done
	if err != nil {
		return d, n, fmt.Errorf("collect: %w", err)
	}
	return d, n, nil
}
