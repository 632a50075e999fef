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
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"
)

// exporterLog is the level of the measured exporter's log (-exporter-log).
var exporterLog = slog.LevelWarn

// options are the flags of a run.
type options struct {
	sizes                                             []int
	partitions, topics, records, batch, brokers, reps int
	broker                                            string
	// profileScrapes is how many extra steady scrapes the -scrape CPU
	// profile covers.
	profileScrapes int
	// share measures share groups instead of consumer groups.
	share bool
	// heapprofile is where the heap profile of each size goes.
	heapprofile string
}

func main() {
	o, serve, memprofile, scrapeMode, latency := parseFlags()
	if o.heapprofile != "" {
		// Sample finely: the default (one per 512 KB) cannot tell the
		// caches apart.
		runtime.MemProfileRate = 1024
	}
	if serve > 0 {
		serveKfake(serve)
		return
	}
	if memprofile != "" && !scrapeMode {
		defer writeMemProfile(memprofile)
	}
	if scrapeMode {
		steadyMemProfile = memprofile
		runScrape(o)
		return
	}
	if latency {
		runShareLatency(o)
		return
	}
	var rows []row
	for _, n := range o.sizes {
		r, err := run(n, o)
		if err != nil {
			fail(err)
		}
		rows = append(rows, r)
	}
	printCollection(o, rows)
}

// parseFlags reads the flags; it sets the package's profile and
// sameProcess.
func parseFlags() (o options, serve int, memprofile string, scrapeMode, latency bool) {
	var (
		sizes      = flag.String("groups", "200,1000", "comma-separated group counts, one cluster each")
		cpuprofile = flag.String("cpuprofile", "", "write a CPU profile here: of the whole run (seeding excluded); with -scrape, of -profile-scrapes steady scrapes after the measured ones")
		inProcess  = flag.Bool("in-process", false, "run kfake inside the measured process instead of a child process")
	)
	flag.IntVar(&o.partitions, "partitions", 24, "partitions per topic; every group consumes one topic")
	flag.IntVar(&o.topics, "topics", 10, "topics the groups are spread over")
	flag.IntVar(&o.records, "records", 200, "records per partition")
	flag.IntVar(&o.batch, "batch", 20, "records per produced batch")
	flag.IntVar(&o.brokers, "brokers", 3, "kfake brokers")
	flag.IntVar(&o.reps, "reps", 5, "repetitions; medians are reported")
	flag.IntVar(&o.profileScrapes, "profile-scrapes", 100, "with -scrape and -cpuprofile: steady scrapes the profile covers")
	flag.StringVar(&o.broker, "broker", "kfake", "with -scrape: kfake (child process) or kafka (Apache Kafka from .cache, a JVM child process)")
	flag.IntVar(&serve, "serve-kfake", 0, "internal: run a kfake cluster of this many brokers, print its addresses, exit when stdin closes")
	flag.BoolVar(&o.share, "share", false, "with -scrape: the groups are share groups (KIP-932), against DescribeShareGroups and DescribeShareGroupOffsets")
	flag.StringVar(&o.heapprofile, "heapprofile", "", "with -scrape: write the heap profile taken where the exporter's heap is measured to FILE.GROUPS")
	flag.StringVar(&memprofile, "memprofile", "", "write an allocation profile of the whole run here; with -scrape, of -profile-scrapes steady scrapes: FILE.base before them and FILE after (go tool pprof -base FILE.base FILE)")
	flag.BoolVar(&scrapeMode, "scrape", false, "measure the whole HTTP /metrics scrape of the running exporter against kadm.Lag")
	flag.IntVar(&shareChunks, "share-chunks", 0, "with -scrape -share: the baseline asks N groups per offsets request on -share-conns connections, as the exporter does (N=1); 0: one request, as kafka-share-groups")
	flag.BoolVar(&latency, "share-latency", false, "time the broker's answers to the share describes: N = 20, 50, 100, 200 groups in one request, 200 in chunks of 10, 25, 50; first and second ask")
	flag.TextVar(&exporterLog, "exporter-log", slog.LevelWarn, "with -scrape: the level of the exporter's log on stderr (debug shows, per collection, how share groups' offsets were asked)")
	flag.Parse()
	sameProcess = *inProcess
	profile = *cpuprofile
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fail(fmt.Errorf("-groups %q: not a positive whole number", s))
		}
		o.sizes = append(o.sizes, n)
	}
	return o, serve, memprofile, scrapeMode, latency
}

func writeMemProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		fail(err)
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		fail(err)
	}
}

// startProfile starts the CPU profile into profile; stop ends it. With no
// -cpuprofile it does nothing.
func startProfile() (stop func(), err error) {
	if profile == "" {
		return func() {}, nil
	}
	f, err := os.Create(profile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// printCollection prints the tables of the collection mode.
func printCollection(o options, rows []row) {
	where := "in a child process"
	if sameProcess {
		where = "in the measured process"
	}
	fmt.Printf("\nkfake %s, %d brokers, %d topics x %d partitions, %d records of 100 bytes per partition in batches of %d, every group lagging on every partition at its own offsets; medians of %d runs; Go %s, GOMAXPROCS %d\n\n",
		where, o.brokers, o.topics, o.partitions, o.records, o.batch, o.reps, runtime.Version(), runtime.GOMAXPROCS(0))
	printTimes(rows, func(r row) [5]time.Duration { return r.med })
	fmt.Println("Fastest of each (less disturbed by other load on the machine):")
	fmt.Println()
	printTimes(rows, func(r row) [5]time.Duration { return r.fast })
	if sameProcess {
		fmt.Println("Process CPU time (user+system, kfake's share included; medians):")
	} else {
		fmt.Println("Process CPU time of the measured process (user+system; kfake runs in a child process; medians):")
	}
	fmt.Println()
	printTimes(rows, func(r row) [5]time.Duration { return r.cpu })
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

// printTimes prints one table of the five timings pick takes from a row.
func printTimes(rows []row, pick func(row) [5]time.Duration) {
	fmt.Println("| groups | kadm.Lag cold | collection cold | ratio | kadm.Lag warm | collection steady | ratio | collection, 10% moved | ratio |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		c := pick(r)
		fmt.Printf("| %d | %s | %s | %.2fx | %s | %s | %.2fx | %s | %.2fx |\n",
			r.groups, ms(c[lagCold]), ms(c[collCold]), ratio(c[collCold], c[lagCold]),
			ms(c[lagWarm]), ms(c[collSteady]), ratio(c[collSteady], c[lagWarm]),
			ms(c[collMoved]), ratio(c[collMoved], c[lagWarm]))
	}
	fmt.Println()
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
