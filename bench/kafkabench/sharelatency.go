package main

// -share-latency: where a real broker's time goes when it answers the
// share-group requests. Each request is timed alone, on a client that
// waits up to two minutes for an answer, so the figures are the broker's
// and not the client's timeouts.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/kafkaclient"
)

// latencyWhole and latencyChunks are the asks measured: the whole set of
// N groups in one request each, and 200 groups in chunks of C groups sent
// at once. Every ask has groups of its own, so its first ask is the
// groups' first since they were seeded.
var (
	latencyWhole  = []int{20, 50, 100, 200}
	latencyChunks = []int{10, 25, 50}
	latencyTotal  = 1000
)

const latencyChunked = 200

// latencySerialOnly skips to the one-group-a-request asks.
var latencySerialOnly bool

func init() {
	flag.BoolVar(&latencySerialOnly, "share-latency-serial", false, "with -share-latency: only the asks of one group a request, one after the other, on 1, 2, 4, 8 connections")
}

func runShareLatency(o options) {
	total := latencyTotal
	addrs, version, stop, err := startBroker(o.broker, o.brokers)
	if err != nil {
		fail(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	k := &config.Kafka{Brokers: addrs, Deadline: 10 * time.Minute}
	t0 := time.Now()
	names, err := seed(ctx, k, total, o.partitions, o.topics, o.records, o.batch, true)
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s; %d share groups x %d partitions seeded in %s\n\n", version, total, o.partitions, time.Since(t0).Round(time.Millisecond))
	// Clients of their own per chunk: a broker answers the requests of
	// one connection one after the other.
	var adms []*kadm.Client
	for i := 0; i < latencyChunked/latencyChunks[0]; i++ {
		cl, err := kafkaclient.New(k, kgo.RequestTimeoutOverhead(2*time.Minute), kgo.RetryTimeout(2*time.Minute))
		if err != nil {
			fail(err)
		}
		defer cl.Close()
		adms = append(adms, kadm.NewClient(cl))
	}
	fmt.Println("| groups | chunk | connections | ask | ShareGroupDescribe | DescribeShareGroupOffsets | groups failed | load average |")
	fmt.Println("|---:|---:|---:|---|---:|---:|---:|---|")
	if latencySerialOnly {
		latencySerialAsks(ctx, adms, names)
		return
	}
	at := 0
	ask := func(set []string, chunk int, conns []*kadm.Client, asks ...string) {
		for _, which := range asks {
			d, o, failed := timeChunked(ctx, conns, set, chunk)
			fmt.Printf("| %d | %d | %d | %s | %s | %s | %d | %s |\n", len(set), chunk, len(conns), which, ms(d), ms(o), failed, loadAvg())
		}
	}
	for _, n := range latencyWhole {
		ask(names[at:at+n], n, adms[:1], "first", "second")
		at += n
	}
	for _, c := range latencyChunks {
		ask(names[at:at+latencyChunked], c, adms[:1], "first", "second")
		at += latencyChunked
	}
	// The same groups again (every ask now a later one), chunks on
	// connections of their own.
	at = total - latencyChunked*len(latencyChunks)
	for _, c := range latencyChunks {
		ask(names[at:at+latencyChunked], c, adms[:latencyChunked/c], "third", "fourth")
		at += latencyChunked
	}
	ask(names[:latencyTotal], 100, adms[:10], "later", "later")
	latencySerialAsks(ctx, adms, names)
}

func latencySerialAsks(ctx context.Context, adms []*kadm.Client, names []string) {
	// One group a request, the next asked when the last is answered, on
	// c connections at once: the broker's own lag reads then meet one at
	// a time (see bench/kafka.md).
	fmt.Println()
	fmt.Println("| groups | one group a request, one after the other, on | DescribeShareGroupOffsets | per group | groups failed | partitions failed | load average |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---|")
	for _, c := range latencySerial {
		d, g, p := timeSerial(ctx, adms[:c], names[:latencyTotal])
		fmt.Printf("| %d | %d | %s | %s | %d | %d | %s |\n", latencyTotal, c, ms(d), ms(d/time.Duration(latencyTotal)), g, p, loadAvg())
	}
}

// latencySerial are the connection counts of the one-group-a-request asks.
var latencySerial = []int{1, 2, 4, 8}

// timeSerial asks the offsets of set one group a request, each connection
// asking its next group when the last is answered; it returns the time
// until the last answer, the groups not answered and the partitions
// answered with an error.
func timeSerial(ctx context.Context, adms []*kadm.Client, set []string) (took time.Duration, groups, parts int) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		next = make(chan string)
	)
	start := time.Now()
	for _, adm := range adms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range next {
				r, err := adm.DescribeShareGroupOffsets(ctx, g)
				gf, pf := shareFailures(r, err, g)
				mu.Lock()
				groups, parts = groups+gf, parts+pf
				mu.Unlock()
			}
		}()
	}
	for _, g := range set {
		next <- g
	}
	close(next)
	wg.Wait()
	return time.Since(start), groups, parts
}

// shareFailures counts a group not answered (or with an error) and the
// partitions of its answer that carry an error.
func shareFailures(r kadm.DescribedShareGroupsOffsets, err error, g string) (groups, parts int) {
	d, ok := r[g]
	if err != nil || !ok || d.Err != nil {
		return 1, 0
	}
	for _, ps := range d.Offsets {
		for _, o := range ps {
			if o.Err != nil {
				parts++
			}
		}
	}
	return 0, parts
}

// timeChunked sends the two share describes of set in chunks of chunk
// groups, every chunk at once, the two kinds one after the other; it
// returns each kind's time until its last answer and how many groups were
// not answered or answered with an error.
func timeChunked(ctx context.Context, adms []*kadm.Client, set []string, chunk int) (desc, offs time.Duration, failed int) {
	var mu sync.Mutex
	run := func(do func(adm *kadm.Client, part []string) int) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for i := 0; i < len(set); i += chunk {
			part := set[i:min(i+chunk, len(set))]
			adm := adms[i/chunk%len(adms)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := do(adm, part)
				mu.Lock()
				failed += n
				mu.Unlock()
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	desc = run(func(adm *kadm.Client, part []string) int {
		r, err := adm.DescribeShareGroups(ctx, part...)
		n := 0
		for _, g := range part {
			if d, ok := r[g]; err != nil || !ok || d.Err != nil {
				n++
			}
		}
		return n
	})
	offs = run(func(adm *kadm.Client, part []string) int {
		r, err := adm.DescribeShareGroupOffsets(ctx, part...)
		n := 0
		for _, g := range part {
			if d, ok := r[g]; err != nil || !ok || d.Err != nil {
				n++
			}
		}
		return n
	})
	return desc, offs, failed
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil || len(b) < 14 {
		return "?"
	}
	return string(b[:14])
}
