package main

import (
	"fmt"
	"time"
)

// report prints the arms' work as markdown tables, the pair's over one
// replica's.
func report(arms []work, kafka bool) {
	one, two := arms[0], arms[1]
	r := func(a, b int64) string { return fmt.Sprintf("%.2fx", ratio(b, a)) }
	fmt.Println("\nThe databases' own counters (pg_stat_database):")
	fmt.Println("| arm | rows returned+fetched | transactions | blocks hit+read | reconcile runs | audits started | scrapes | length |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	for i, w := range arms {
		fmt.Printf("| %d replica(s) | %d | %d | %d | %d | %d | %d | %v |\n", i+1, w.tuples, w.xacts, w.blocks, w.runs, w.audits, w.scrapes, w.length.Round(100*time.Millisecond))
	}
	fmt.Printf("| ratio | %s | %s | %s | %s | | | %.3fx |\n", r(one.tuples, two.tuples), r(one.xacts, two.xacts), r(one.blocks, two.blocks), r(one.runs, two.runs),
		ratio(int64(two.length), int64(one.length)))

	fmt.Println("\nThe exporters' transactions, counted on the wire (sessions opened in brackets):")
	fmt.Println("| arm | lease | pool | other | all |")
	fmt.Println("|---|---:|---:|---:|---:|")
	sum := func(m map[string]int64) int64 { return m[kindLease] + m[kindPool] + m[kindOther] }
	for i, w := range arms {
		fmt.Printf("| %d replica(s) | %d (%d) | %d (%d) | %d (%d) | %d |\n", i+1,
			w.proxXacts[kindLease], w.sessions[kindLease], w.proxXacts[kindPool], w.sessions[kindPool],
			w.proxXacts[kindOther], w.sessions[kindOther], sum(w.proxXacts))
	}
	fmt.Printf("| ratio | %s | %s | | %s |\n", r(one.proxXacts[kindLease], two.proxXacts[kindLease]),
		r(one.proxXacts[kindPool], two.proxXacts[kindPool]), r(sum(one.proxXacts), sum(two.proxXacts)))
	if !kafka {
		return
	}
	fmt.Println("\nThe broker's own counters (JMX, read with JmxTool):")
	fmt.Println("| arm | audited topic: bytes out | audited topic: fetch requests | all bytes out | all responses | broker CPU |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for i, w := range arms {
		b := w.broker
		fmt.Printf("| %d replica(s) | %d | %d | %d | %d | %.2f s |\n", i+1, b.topicBytes, b.topicFetches, b.bytesOut, b.requests, float64(b.cpuNanos)/1e9)
	}
	a, b := one.broker, two.broker
	fmt.Printf("| ratio | %s | %s | %s | %s | %s |\n", r(a.topicBytes, b.topicBytes), r(a.topicFetches, b.topicFetches), r(a.bytesOut, b.bytesOut), r(a.requests, b.requests), r(a.cpuNanos, b.cpuNanos))
}
