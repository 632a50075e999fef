package main

import (
	"fmt"
	"io"
	"sort"

	"github.com/outbox-exporter/outbox_exporter/generate"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// generateCmd writes the dashboards and rule files made for the
// configuration into c.generateOut; on error nothing is half-written.
// It never connects, so the DSNs' environment variables need not be set.
func (c *cli) generateCmd(stdout, stderr io.Writer) int {
	cfg, err := config.LoadWithoutSecrets(c.configFile)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	files, err := generate.Files(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "generate: %v\n", err)
		return 1
	}
	if err := generate.WriteFiles(files, c.generateOut); err != nil {
		fmt.Fprintf(stderr, "generate: %v\n", err)
		return 1
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(stdout, "wrote %s/%s\n", c.generateOut, n)
	}
	return 0
}
