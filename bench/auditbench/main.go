// Command auditbench measures the publish audit (collectors/audit) against a
// baseline measured in the same run, and prints a table.
//
// Tail passes: a kfake broker, in a child process so that its CPU is not
// counted, holds -records records spread over the last hour (an event id
// header and a -value-bytes body each). Each pass is a fresh child process
// that reads all of them: the baseline is a bare kgo consumer with the
// audit's options that only counts records; the audit passes run the real
// Auditor (extract, sample, window) at sample 0.1 and 1.0. CPU is the
// child's getrusage user+system time, so "cores at 50k/s" is CPU seconds
// per record times 50,000.
//
// Window passes: the steady state of a full window at 50,000 records/s,
// fed through audit.Tally (the tailer's sampler and window, no broker: an
// hour at 50k/s is 180M records, more than a test broker holds). The
// baseline is a plain Go map from fingerprint to timestamp holding the
// same sampled ids.
//
//	go run ./bench/auditbench            # full run (a few minutes)
//	go run ./bench/auditbench -quick     # smaller, for a smoke test
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/collectors/audit"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
)

const (
	topic = "messages"
	rate  = 50_000 // records per second the target is stated at
)

var (
	mode       = flag.String("mode", "run", "run (orchestrate), query (the outbox-side query in PostgreSQL), or a child: broker, tail, window, naive")
	records    = flag.Int("records", 2_000_000, "records on the broker for the tail passes")
	valueBytes = flag.Int("value-bytes", 200, "record value size")
	brokers    = flag.String("brokers", "", "child: broker address")
	sample     = flag.Float64("sample", 0.1, "child: audit sample; 0 = bare consumer")
	minutes    = flag.Int("minutes", 70, "child window/naive: minutes of traffic at 50k/s to feed")
	windowFlag = flag.Duration("window", time.Hour, "audit window")
	quick      = flag.Bool("quick", false, "run: smaller sizes")
	passes     = flag.String("passes", "tail,window,combined", "run: which passes")
)

// result is one pass's figures, printed by a child as one JSON line.
type result struct {
	Pass      string  `json:"pass"`
	Records   int64   `json:"records"`
	Wall      float64 `json:"wall_s"`
	CPU       float64 `json:"cpu_s"`
	RSSBefore int64   `json:"rss_before"`
	RSSAfter  int64   `json:"rss_after"`
	RSSPeak   int64   `json:"rss_peak"`
	HeapInuse int64   `json:"heap_inuse"`
	IDs       int64   `json:"ids"`
	Bytes     int64   `json:"state_bytes"`
}

func main() {
	flag.Parse()
	var err error
	switch *mode {
	case "run":
		err = run()
	case "broker":
		err = broker()
	case "tail":
		err = tail()
	case "window":
		err = window()
	case "naive":
		err = naive()
	case "combined":
		err = combined()
	case "query":
		err = query()
	default:
		err = fmt.Errorf("unknown mode %q", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "auditbench:", err)
		os.Exit(1)
	}
}

func run() error {
	n, feedMin, smallMin := *records, 70, 10
	if *quick {
		n, feedMin, smallMin = 200_000, 8, 2
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "seeding %d records on a kfake broker...\n", n)
	br := exec.Command(self, "-mode", "broker", "-records", strconv.Itoa(n), "-value-bytes", strconv.Itoa(*valueBytes))
	br.Stderr = os.Stderr
	in, err := br.StdinPipe()
	if err != nil {
		return err
	}
	out, err := br.StdoutPipe()
	if err != nil {
		return err
	}
	if err := br.Start(); err != nil {
		return err
	}
	defer func() { _ = in.Close(); _ = br.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	addr := strings.TrimSpace(strings.TrimPrefix(line, "ADDR "))

	child := func(args ...string) (result, error) {
		fmt.Fprintf(os.Stderr, "pass %v...\n", args)
		cmd := exec.Command(self, args...)
		cmd.Stderr = os.Stderr
		b, err := cmd.Output()
		if err != nil {
			return result{}, fmt.Errorf("pass %v: %w", args, err)
		}
		var r result
		return r, json.Unmarshal(b, &r)
	}
	want := func(p string) bool { return strings.Contains(","+*passes+",", ","+p+",") }
	var tails []result
	for _, s := range []string{"0", "0.1", "1"} {
		if !want("tail") {
			break
		}
		r, err := child("-mode", "tail", "-brokers", addr, "-sample", s, "-records", strconv.Itoa(n))
		if err != nil {
			return err
		}
		tails = append(tails, r)
	}
	var wins []result
	for _, args := range [][]string{
		{"-mode", "window", "-sample", "0.1", "-minutes", strconv.Itoa(feedMin), "-window", "1h"},
		{"-mode", "naive", "-sample", "1", "-minutes", strconv.Itoa(smallMin), "-window", fmt.Sprint(smallMin, "m")},
		{"-mode", "window", "-sample", "1", "-minutes", strconv.Itoa(smallMin), "-window", fmt.Sprint(smallMin, "m")},
	} {
		if !want("window") {
			break
		}
		r, err := child(args...)
		if err != nil {
			return err
		}
		wins = append(wins, r)
	}
	var comb []result
	if want("combined") {
		r, err := child("-mode", "combined", "-brokers", addr, "-sample", "0.1", "-records", strconv.Itoa(n), "-minutes", strconv.Itoa(feedMin), "-window", "1h")
		if err != nil {
			return err
		}
		comb = append(comb, r)
	}
	report(tails, wins, comb)
	return nil
}

func mb(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

func report(tails, wins, comb []result) {
	fmt.Printf("go %s, %s/%s, %d CPUs, %s\n\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339))
	if len(tails) > 0 {
		reportTails(tails)
	}
	if len(wins) > 0 {
		reportWindows(wins)
	}
	for _, r := range comb {
		fmt.Printf("\n%s: %d ids held, %d records tailed; RSS after %s MB, peak %s MB (budget 200 MB)\n",
			r.Pass, r.IDs, r.Records, mb(r.RSSAfter), mb(r.RSSPeak))
	}
}

func reportTails(tails []result) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "tail pass\trecords\twall s\tcpu s\trecords/cpu-s\tcores at 50k/s\tcpu × baseline\tpeak RSS MB\tRSS × baseline\tsampled ids\t")
	base := tails[0]
	for _, r := range tails {
		perSec := float64(r.Records) / r.CPU
		fmt.Fprintf(w, "%s\t%d\t%.2f\t%.2f\t%.0f\t%.3f\t%.2f\t%s\t%.2f\t%d\t\n", r.Pass, r.Records, r.Wall, r.CPU, perSec, rate/perSec,
			r.CPU/base.CPU, mb(r.RSSPeak), float64(r.RSSPeak)/float64(base.RSSPeak), r.IDs)
	}
	_ = w.Flush()
	fmt.Println()
}

func reportWindows(wins []result) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "window pass\trecords fed\tids held\tcpu s\tcores at 50k/s\tRSS before MB\tRSS after MB\tpeak RSS MB\tGo heap MB\tRSS bytes/id\testimate bytes/id\t")
	for _, r := range wins {
		perID := float64(r.RSSAfter-r.RSSBefore) / float64(r.IDs)
		est := float64(r.Bytes) / float64(r.IDs)
		fmt.Fprintf(w, "%s\t%d\t%d\t%.2f\t%.3f\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t\n", r.Pass, r.Records, r.IDs, r.CPU, rate*r.CPU/float64(r.Records),
			mb(r.RSSBefore), mb(r.RSSAfter), mb(r.RSSPeak), mb(r.HeapInuse), perID, est)
	}
	_ = w.Flush()
	if len(wins) == 3 {
		n, o := wins[1], wins[2]
		fmt.Printf("\nbytes per id, window ÷ naive map (same ids, same run): %.3f\n",
			(float64(o.RSSAfter-o.RSSBefore)/float64(o.IDs))/(float64(n.RSSAfter-n.RSSBefore)/float64(n.IDs)))
	}
}

// broker runs kfake on a loopback port, seeds it and serves until stdin
// closes.
func broker() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	c, err := kfake.NewCluster(kfake.Ports(port), kfake.SeedTopics(6, topic))
	if err != nil {
		return err
	}
	defer c.Close()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		return err
	}
	ctx := context.Background()
	start := time.Now().Add(-time.Hour).Add(time.Minute)
	step := (time.Hour - 2*time.Minute) / time.Duration(*records)
	value := make([]byte, *valueBytes)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range value {
		value[i] = byte('a' + rng.IntN(26))
	}
	errc := make(chan error, 1)
	for i := 0; i < *records; i++ {
		r := &kgo.Record{Topic: topic, Timestamp: start.Add(time.Duration(i) * step), Value: value,
			Headers: []kgo.RecordHeader{{Key: "event_id", Value: eventID(nil, uint64(i))}}}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	cl.Close()
	select {
	case err := <-errc:
		return fmt.Errorf("produce: %w", err)
	default:
	}
	fmt.Printf("ADDR %s\n", addr)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the parent closes stdin
	return nil
}

// eventID formats a UUID-shaped id from i without allocating when buf has room.
func eventID(buf []byte, i uint64) []byte {
	x := i*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019
	buf = buf[:0]
	buf = append(buf, "evt-"...)
	buf = strconv.AppendUint(buf, x, 16)
	return buf
}

// combined holds a full window at -sample in a Tally, then runs the audit
// tail pass in the same process: the resident memory of an auditor with a
// full window while its consumer reads at full speed (as at a restart).
func combined() error {
	tl := audit.NewTally(*sample, *windowFlag, time.Unix(1_800_000_000, 0))
	feed(func(id []byte, ts time.Time) { tl.Add(id, ts, ts) }, tl.Advance)
	ids, _ := tl.Size()
	runtime.GC()
	out := os.Stdout
	// The tail reads the broker's records from two hours back: feeding the
	// window took minutes, and the oldest records may be past an hour.
	r, err := tailResult(2 * time.Hour)
	if err != nil {
		return err
	}
	r.Pass = fmt.Sprintf("combined: full %v window at sample %g + audit tail pass", *windowFlag, *sample)
	r.IDs = int64(ids) + r.IDs
	runtime.KeepAlive(tl)
	return json.NewEncoder(out).Encode(r)
}

func tail() error {
	r, err := tailResult(*windowFlag)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

func tailResult(win time.Duration) (result, error) {
	kcfg := &config.Kafka{Brokers: []string{*brokers}}
	before := rss("VmRSS")
	cpu0, wall0 := cpuTime(), time.Now()
	r := result{RSSBefore: before}
	if *sample == 0 {
		r.Pass = "baseline: bare kgo consumer"
		cl, err := kafkaclient.New(kcfg, audit.ConsumerOpts(&config.Audit{Topics: []string{topic}, Window: win}, time.Now())...)
		if err != nil {
			return result{}, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		for r.Records < int64(*records) {
			fs := cl.PollRecords(ctx, 10000)
			if err := fs.Err0(); err != nil {
				return result{}, err
			}
			fs.EachRecord(func(*kgo.Record) { r.Records++ })
		}
		cl.Close()
	} else {
		r.Pass = fmt.Sprintf("audit sample %g", *sample)
		a, err := audit.New("messages", &config.Audit{Topics: []string{topic}, EventID: "header:event_id", Sample: *sample, Grace: time.Minute, Window: win},
			&config.Outbox{Table: "outbox", ID: "event_id", CreatedAt: "created_at"}, kcfg, nil, nil)
		if err != nil {
			return result{}, err
		}
		a.SetCompareInterval(24 * time.Hour) // the outbox side is not measured here
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		a.Start(ctx)
		for {
			s := a.Stats()
			if s.Records >= uint64(*records) {
				r.Records, r.IDs, r.Bytes = int64(s.Records), int64(s.SampledIDs), int64(s.StateBytes)
				break
			}
			if ctx.Err() != nil {
				return result{}, fmt.Errorf("read %d of %d records: %v", s.Records, *records, s.Err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		r.RSSAfter = rss("VmRSS")
		a.Close()
	}
	r.CPU, r.Wall = cpuTime()-cpu0, time.Since(wall0).Seconds()
	if r.RSSAfter == 0 {
		r.RSSAfter = rss("VmRSS")
	}
	r.RSSPeak = rss("VmHWM")
	return r, nil
}

// feed calls add for -minutes of traffic at 50k/s, with simulated time.
func feed(add func(id []byte, ts time.Time), advance func(now time.Time)) int64 {
	t0 := time.Unix(1_800_000_000, 0)
	n := int64(*minutes) * 60 * rate
	step := time.Second / rate
	buf := make([]byte, 0, 32)
	for i := int64(0); i < n; i++ {
		ts := t0.Add(time.Duration(i) * step)
		buf = eventID(buf, uint64(i))
		add(buf, ts)
		if i%rate == 0 {
			advance(ts)
		}
	}
	advance(t0.Add(time.Duration(n) * step))
	return n
}

func window() error {
	runtime.GC()
	r := result{Pass: fmt.Sprintf("audit window, sample %g, %v", *sample, *windowFlag), RSSBefore: rss("VmRSS")}
	cpu0, wall0 := cpuTime(), time.Now()
	tl := audit.NewTally(*sample, *windowFlag, time.Unix(1_800_000_000, 0))
	r.Records = feed(func(id []byte, ts time.Time) { tl.Add(id, ts, ts) }, tl.Advance)
	r.CPU, r.Wall = cpuTime()-cpu0, time.Since(wall0).Seconds()
	ids, bytes := tl.Size()
	r.IDs, r.Bytes = int64(ids), int64(bytes)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.HeapInuse = int64(ms.HeapInuse)
	r.RSSAfter, r.RSSPeak = rss("VmRSS"), rss("VmHWM")
	return json.NewEncoder(os.Stdout).Encode(r)
}

// naive holds the same sampled fingerprints in a Go map (fingerprint →
// record time), the obvious implementation, for the bytes-per-id baseline.
func naive() error {
	runtime.GC()
	r := result{Pass: fmt.Sprintf("baseline: Go map, sample %g, %v", *sample, *windowFlag), RSSBefore: rss("VmRSS")}
	cpu0, wall0 := cpuTime(), time.Now()
	s := audit.NewSampler(*sample)
	m := map[uint64]int64{}
	r.Records = feed(func(id []byte, ts time.Time) {
		h, fp := audit.Digest(id)
		if s.Sampled(h) {
			m[fp] = ts.UnixMilli()
		}
	}, func(time.Time) {})
	r.CPU, r.Wall = cpuTime()-cpu0, time.Since(wall0).Seconds()
	r.IDs = int64(len(m))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.HeapInuse = int64(ms.HeapInuse)
	r.RSSAfter, r.RSSPeak = rss("VmRSS"), rss("VmHWM")
	runtime.KeepAlive(m)
	return json.NewEncoder(os.Stdout).Encode(r)
}

func cpuTime() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// rss reads a /proc/self/status field (VmRSS, VmHWM) in bytes.
func rss(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field+":") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}
