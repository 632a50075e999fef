package app

import (
	"context"
	"log/slog"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// A cdc section gives one cdc collector per database, whatever the number
// of slots on it, so that they are read in one statement.
func TestBuildWiresCDCPerDatabase(t *testing.T) {
	const yml = `
databases:
  app: {dsn: "postgres://x@127.0.0.1:1/app"}
  billing: {dsn: "postgres://x@127.0.0.1:1/billing"}
cdc:
  orders: {database: app, slot: orders_slot, deadline: 1m}
  users: {database: app, slot: users_slot, deadline: 1m}
  invoices: {database: billing, slot: invoices_slot, deadline: 5m}
`
	cfg, err := config.Parse([]byte(yml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	a, err := Build(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var targets []string
	for _, c := range a.Exporter.Collectors() {
		if c.Name() == "cdc" {
			targets = append(targets, c.Target())
		}
	}
	if len(targets) != 2 || targets[0] != "app" || targets[1] != "billing" {
		t.Errorf("cdc collectors for %v, want one for app and one for billing", targets)
	}
}
