package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The PostgreSQL server's CPU time, read from /proc: the server runs on
// this machine (the bench reaches it on loopback), and /proc/PID/stat is
// readable by every user.
//
// Two measures. Per session: each session's backend process (its PID
// comes in the BackendKeyData message the server sends at startup), the
// time the scheduler ran it (/proc/PID/schedstat, in nanoseconds, where
// stat's times come in 10 ms ticks) sampled while it lives, the last
// sample kept; the
// exporters' reconcile statements run without parallel workers, so a
// session's process is all the server does for it. And the whole server:
// the postmaster and every process it forked, the ones that exited
// included (their time is added to the postmaster's children's time when
// it reaps them), which mixes in autovacuum, the checkpointer and the
// bench's own reads, as the broker's process CPU does.

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times
// (100 on every Linux architecture the bench runs on).
const clockTicks = 100

// procTimes returns a process's own user+system time and its reaped
// children's, in clock ticks, and its parent's PID.
func procTimes(pid int) (own, children int64, ppid int, err error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	own, children, ppid, err = parseStat(string(raw))
	if err != nil {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return own, children, ppid, nil
}

// parseStat reads a /proc/PID/stat line.
func parseStat(s string) (own, children int64, ppid int, err error) {
	// The command name, in brackets, may hold spaces: fields count from
	// the last closing bracket.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("no command name")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): ppid is field 4, utime..cstime 14..17.
	if len(f) < 15 {
		return 0, 0, 0, fmt.Errorf("%d fields, want at least 17", len(f)+2)
	}
	var v [4]int64
	for k := range v {
		if v[k], err = strconv.ParseInt(f[11+k], 10, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("field %d: %w", 14+k, err)
		}
	}
	if ppid, err = strconv.Atoi(f[1]); err != nil {
		return 0, 0, 0, fmt.Errorf("field 4: %w", err)
	}
	return v[0] + v[1], v[2] + v[3], ppid, nil
}

// serverTicks is the postmaster's time and that of every process it
// forked, living or reaped.
func serverTicks(postmaster int) (int64, error) {
	own, reaped, _, err := procTimes(postmaster)
	if err != nil {
		return 0, err
	}
	total := own + reaped
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		o, c, pp, err := procTimes(pid)
		if err != nil || pp != postmaster {
			continue // gone meanwhile, or no child of the server
		}
		total += o + c
	}
	return total, nil
}

// runNanos is the time the scheduler ran a process.
func runNanos(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/%d/schedstat: empty", pid)
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/schedstat: %w", pid, err)
	}
	return n, nil
}

// sessionCPU follows the backend processes of the proxy's sessions.
type sessionCPU struct {
	mu   sync.Mutex
	keys map[int]key   // backend PID → replica and session kind
	last map[int]int64 // backend PID → last run time seen, ns
	stop chan struct{}
}

func newSessionCPU(every time.Duration) *sessionCPU {
	s := &sessionCPU{keys: map[int]key{}, last: map[int]int64{}, stop: make(chan struct{})}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *sessionCPU) close() { close(s.stop) }

// add follows a session's backend.
func (s *sessionCPU) add(pid int, k key) {
	s.mu.Lock()
	s.keys[pid] = k
	s.mu.Unlock()
	s.sample()
}

// sample reads every followed backend's time; one that exited keeps its
// last sample.
func (s *sessionCPU) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for pid := range s.keys {
		if ns, err := runNanos(pid); err == nil {
			s.last[pid] = ns
		}
	}
}

// take samples once more and returns each session's run time by replica
// and kind, largest first, and forgets the sessions followed so far.
func (s *sessionCPU) take() map[key][]int64 {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	by := map[key][]int64{}
	for pid, k := range s.keys {
		by[k] = append(by[k], s.last[pid])
	}
	for _, v := range by {
		sort.Slice(v, func(i, j int) bool { return v[i] > v[j] })
	}
	s.keys, s.last = map[int]key{}, map[int]int64{}
	return by
}
