package main

// CPU time per collection, the exporter's and its database sessions',
// on a shared machine a steadier figure than the wall time, which
// includes waiting for a core.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// cpuClock reads the CPU time used so far by this process and by the
// server processes of pool's sessions.
type cpuClock struct {
	pids []int
}

// newCPUClock finds the server processes of pool's idle sessions (all of
// them between collections).
func newCPUClock(ctx context.Context, pool *pgxpool.Pool) (*cpuClock, error) {
	conns := pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	c := &cpuClock{}
	for _, conn := range conns {
		c.pids = append(c.pids, int(conn.Conn().PgConn().PID()))
	}
	if len(c.pids) == 0 {
		return nil, fmt.Errorf("no idle session to read the CPU time of")
	}
	return c, nil
}

// read returns the CPU time of this process and of the sessions'
// server processes.
func (c *cpuClock) read() (self, server time.Duration, err error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, err
	}
	self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	for _, pid := range c.pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, 0, err
		}
		// The fields after the command's closing parenthesis; utime and
		// stime are the 14th and 15th of the line, in clock ticks
		// (100 a second on Linux).
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		for _, i := range []int{11, 12} {
			ticks, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("read the CPU time of process %d: %w", pid, err)
			}
			server += time.Duration(ticks) * 10 * time.Millisecond
		}
	}
	return self, server, nil
}

// medianCPU is median, with the CPU time a run of f took in this process
// and in the server processes of pool's sessions.
func medianCPU(ctx context.Context, pool *pgxpool.Pool, runs int, f func() error) (med, best, self, server time.Duration, err error) {
	clock, err := newCPUClock(ctx, pool)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	self0, server0, err := clock.read()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if med, best, err = median(runs, f); err != nil {
		return 0, 0, 0, 0, err
	}
	self1, server1, err := clock.read()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	// median runs f once more than runs, untimed.
	n := time.Duration(runs + 1)
	return med, best, (self1 - self0) / n, (server1 - server0) / n, nil
}
