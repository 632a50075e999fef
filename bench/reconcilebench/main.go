// Command reconcilebench measures reconcile full sweeps and windowed runs
// on 10M authority rows against a 10M-row target in another database, with
// 100 injected gaps, against naive baselines in the same run, and prints a
// table. It seeds reconcile_bench_a and reconcile_bench_b once and reuses
// them.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

var start = time.Now()

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
}

func dbURL(server, name string) string {
	u, err := url.Parse(server)
	if err != nil {
		panic(err)
	}
	u.Path = "/" + name
	return u.String()
}

func main() {
	server := flag.String("server", pgtest.ServerURL(), "PostgreSQL server URL (superuser)")
	rows := flag.Int("rows", 10_000_000, "authority rows")
	seedOnly := flag.Bool("seed-only", false, "seed the databases and exit")
	reseed := flag.Bool("reseed", false, "seed again even if already seeded")
	childMode := flag.String("child", "", "internal: run one mode and print its outcome")
	aURL := flag.String("a", "", "internal: authority database URL")
	bURL := flag.String("b", "", "internal: target database URL")
	window := flag.Duration("window", 0, "internal: window of a windowed run")
	modeList := flag.String("modes", defaultModes, "comma-separated modes to measure; the first is the baseline")
	repeat := flag.Int("repeat", 2, "rounds over the modes")
	cpuprofile := flag.String("cpuprofile", "", "internal: write a CPU profile of a child run")
	keys := flag.String("keys", "bigint", "key type: bigint (reconcile_bench_a, _b) or uuid (reconcile_bench_uuid_a, _b)")
	flag.Parse()
	if _, ok := keyExprs[*keys]; !ok {
		fmt.Fprintf(os.Stderr, "reconcilebench: -keys %q: use bigint or uuid\n", *keys)
		os.Exit(2)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			_ = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	if *childMode != "" {
		if err := child(context.Background(), *childMode, *aURL, *bURL, *rows, *keys, *window, 0); err != nil {
			fmt.Fprintln(os.Stderr, "reconcilebench:", *childMode+":", err)
			pprof.StopCPUProfile()
			os.Exit(1)
		}
		return
	}
	if err := run(*server, *rows, *keys, *seedOnly, *reseed, strings.Split(*modeList, ","), *repeat); err != nil {
		fmt.Fprintln(os.Stderr, "reconcilebench:", err)
		os.Exit(1)
	}
}

func run(server string, rows int, keys string, seedOnly, reseed bool, modes []string, repeat int) error {
	ctx := context.Background()
	aURL, bURL, err := prepare(ctx, server, rows, keys, reseed)
	if err != nil {
		return err
	}
	if seedOnly {
		return nil
	}
	return measure(ctx, aURL, bURL, rows, keys, modes, max(repeat, 1))
}

func prepare(ctx context.Context, server string, rows int, keys string, reseed bool) (string, string, error) {
	srv, err := pgx.Connect(ctx, server)
	if err != nil {
		return "", "", fmt.Errorf("connect %s: %w", server, err)
	}
	defer srv.Close(ctx)
	names := []string{"reconcile_bench_a", "reconcile_bench_b"}
	if keys != "bigint" {
		names = []string{"reconcile_bench_" + keys + "_a", "reconcile_bench_" + keys + "_b"}
	}
	urls := []string{dbURL(server, names[0]), dbURL(server, names[1])}
	seeders := []func(context.Context, *pgx.Conn, int, string) error{seedAuthority, seedTarget}
	for i, name := range names {
		if err := ensureDatabase(ctx, srv, name); err != nil {
			return "", "", err
		}
		conn, err := pgx.Connect(ctx, urls[i])
		if err != nil {
			return "", "", fmt.Errorf("connect %s: %w", name, err)
		}
		if reseed || !seeded(ctx, conn, rows) {
			logf("seeding %s with %d rows", name, rows)
			if err := seeders[i](ctx, conn, rows, keys); err != nil {
				conn.Close(ctx)
				return "", "", fmt.Errorf("seed %s: %w", name, err)
			}
		} else {
			logf("%s already seeded with %d rows", name, rows)
			// A seed made before bench_key existed gets it now.
			if _, err := conn.Exec(ctx, keyFunc(keys)); err != nil {
				conn.Close(ctx)
				return "", "", fmt.Errorf("seed %s: %w", name, err)
			}
			if err := ensureCovering(ctx, conn, i == 0); err != nil {
				conn.Close(ctx)
				return "", "", fmt.Errorf("seed %s: %w", name, err)
			}
		}
		conn.Close(ctx)
	}
	return urls[0], urls[1], nil
}
