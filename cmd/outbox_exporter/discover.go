package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/outbox-exporter/outbox_exporter/discover"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// discoverCmd reads the catalog of the database given by --dsn, or of
// every database of --config.file, and prints a configuration for the
// outbox tables it recognises. Exit 0 when it found any, 1 when none, 2 on
// an error.
func (c *cli) discoverCmd(ctx context.Context, stdout, stderr io.Writer) int {
	dbs := map[string]*config.Database{}
	switch {
	case c.discoverDSN != "" && c.configFile != "":
		fmt.Fprintln(stderr, "outbox_exporter discover: give --dsn or --config.file, not both")
		return 2
	case c.discoverDSN != "":
		if msg := config.DSNProblem(c.discoverDSN); msg != "" {
			fmt.Fprintf(stderr, "outbox_exporter discover: --dsn does not parse: %s\n", msg)
			return 2
		}
		dbs["main"] = &config.Database{DSN: config.Secret(c.discoverDSN), MaxConnections: 1,
			StatementTimeout: config.DefaultStatementTimeout, LockTimeout: config.DefaultLockTimeout}
	case c.configFile != "":
		cfg, err := config.Load(c.configFile)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		dbs = cfg.Databases
	default:
		fmt.Fprintln(stderr, "outbox_exporter discover: --dsn or --config.file is required")
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var found []discover.Database
	n := 0
	for _, name := range slices.Sorted(maps.Keys(dbs)) {
		d, err := discover.Scan(ctx, name, dbs[name])
		if err != nil {
			fmt.Fprintf(stderr, "outbox_exporter discover: %v\n", err)
			return 2
		}
		n += len(d.Found)
		found = append(found, d)
	}
	from := ""
	if c.discoverDSN == "" {
		from = c.configFile
	}
	out, err := discover.Render(found, from)
	if err != nil {
		fmt.Fprintf(stderr, "outbox_exporter discover: %v\n", err)
		return 2
	}
	fmt.Fprint(stdout, out)
	if n == 0 {
		fmt.Fprintln(stderr, "outbox_exporter discover: no outbox table found")
		return 1
	}
	return 0
}
