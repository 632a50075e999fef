package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
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

	reportWire(arms)
	if !kafka {
		return
	}
	fmt.Println("\nThe broker's own counters (JMX, read with JmxTool):")
	fmt.Println("| arm | audited topic: bytes out | audited topic: fetch requests | all bytes out | all responses | request handlers' time | broker CPU |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	for i, w := range arms {
		b := w.broker
		fmt.Printf("| %d replica(s) | %d | %d | %d | %d | %.1f ms | %.2f s |\n", i+1, b.topicBytes, b.topicFetches, b.bytesOut, b.requests, float64(b.localMicros)/1e3, float64(b.cpuNanos)/1e9)
	}
	ka, kb := one.broker, two.broker
	fmt.Printf("| ratio | %s | %s | %s | %s | %s | %s |\n", r(ka.topicBytes, kb.topicBytes), r(ka.topicFetches, kb.topicFetches), r(ka.bytesOut, kb.bytesOut), r(ka.requests, kb.requests), r(ka.localMicros, kb.localMicros), r(ka.cpuNanos, kb.cpuNanos))
}

// replicaWork is what the proxy counted of one replica, or of all of an
// arm's (replica -1).
type replicaWork struct {
	leaseXacts, poolXacts, otherXacts int64
	leaseSessions, poolSessions       int64
	bytes                             int64
	cpuNanos                          int64
	sessionNanos                      []int64
}

func (x wire) of(replica int) replicaWork {
	var rw replicaWork
	for k, v := range x.xacts {
		if replica >= 0 && k.replica != replica {
			continue
		}
		switch k.kind {
		case kindLease:
			rw.leaseXacts += v
		case kindPool:
			rw.poolXacts += v
		default:
			rw.otherXacts += v
		}
	}
	for k, v := range x.sessions {
		if replica < 0 || k.replica == replica {
			switch k.kind {
			case kindLease:
				rw.leaseSessions += v
			case kindPool:
				rw.poolSessions += v
			}
		}
	}
	for _, m := range []map[key]int64{x.sent, x.received} {
		for k, v := range m {
			if replica < 0 || k.replica == replica {
				rw.bytes += v
			}
		}
	}
	for k, v := range x.cpuNanos {
		if replica < 0 || k.replica == replica {
			for _, n := range v {
				rw.cpuNanos += n
			}
			rw.sessionNanos = append(rw.sessionNanos, v...)
		}
	}
	slices.SortFunc(rw.sessionNanos, func(a, b int64) int { return cmp.Compare(b, a) })
	return rw
}

func (rw replicaWork) xacts() int64 { return rw.leaseXacts + rw.poolXacts + rw.otherXacts }

// reportWire prints what the proxy counted, by replica: transactions
// and bytes on the wire and the CPU time of the sessions' backends; the
// pair's over one replica's; and what the replicas that led nothing
// added, over one replica's (their own sessions only, so no difference
// between the arms' elected work, which is the same work run twice,
// moves it).
func reportWire(arms []work) {
	one, two := arms[0], arms[1]
	ms := func(ns int64) string { return fmt.Sprintf("%.1f ms", float64(ns)/1e6) }
	fmt.Println("\nThe exporters' sessions, counted on the wire and in the server's processes (sessions opened in brackets):")
	fmt.Println("| arm | replica | leads | lease transactions | pool transactions | all transactions | bytes both ways | their backends' CPU | each session's |")
	fmt.Println("|---|---|---|---:|---:|---:|---:|---:|---|")
	line := func(arm, replica, leads string, rw replicaWork) {
		var each []string
		for _, n := range rw.sessionNanos {
			each = append(each, ms(n))
		}
		fmt.Printf("| %s | %s | %s | %d (%d) | %d (%d) | %d | %d | %s | %s |\n", arm, replica, leads,
			rw.leaseXacts, rw.leaseSessions, rw.poolXacts, rw.poolSessions, rw.xacts(), rw.bytes, ms(rw.cpuNanos), strings.Join(each, ", "))
	}
	for i, w := range arms {
		for j := range w.runsBy {
			line(fmt.Sprintf("%d replica(s)", i+1), fmt.Sprint(j), leads(w, j), w.wire.of(j))
		}
		line(fmt.Sprintf("%d replica(s)", i+1), "all", "", w.wire.of(-1))
	}
	a, b := one.wire.of(-1), two.wire.of(-1)
	r := func(x, y int64) string { return fmt.Sprintf("%.3fx", ratio(y, x)) }
	fmt.Printf("| ratio | | | %s | %s | %s | %s | %s | |\n", r(a.leaseXacts, b.leaseXacts), r(a.poolXacts, b.poolXacts),
		r(a.xacts(), b.xacts()), r(a.bytes, b.bytes), r(a.cpuNanos, b.cpuNanos))
	var idle replicaWork
	for j := range two.runsBy {
		if leads(two, j) == "nothing" {
			rw := two.wire.of(j)
			idle.leaseXacts, idle.poolXacts, idle.otherXacts = idle.leaseXacts+rw.leaseXacts, idle.poolXacts+rw.poolXacts, idle.otherXacts+rw.otherXacts
			idle.bytes, idle.cpuNanos = idle.bytes+rw.bytes, idle.cpuNanos+rw.cpuNanos
		}
	}
	fmt.Printf("| one replica + what the pair's replicas that led nothing added | | | | | %s | %s | %s | |\n",
		r(a.xacts(), a.xacts()+idle.xacts()), r(a.bytes, a.bytes+idle.bytes), r(a.cpuNanos, a.cpuNanos+idle.cpuNanos))
	fmt.Printf("\nThe whole server's CPU (every process of it, autovacuum and the bench's own reads included): %s and %s, %s\n",
		ms(one.serverTicks*1e9/clockTicks), ms(two.serverTicks*1e9/clockTicks), r(one.serverTicks, two.serverTicks))
}

// leads names the tasks replica j of an arm led, from its log: the
// reconcile job when it completed runs, the audit when it started one.
func leads(w work, j int) string {
	var l []string
	if w.runsBy[j] > 0 {
		l = append(l, "reconcile")
	}
	if w.auditsBy[j] > 0 {
		l = append(l, "audit")
	}
	if len(l) == 0 {
		return "nothing"
	}
	return strings.Join(l, ", ")
}
