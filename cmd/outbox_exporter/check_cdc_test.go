package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/collectors/cdc/cdctest"
)

// check fails while a cdc entry's slot is missing, naming it, and passes
// once the connector's logical slot exists.
func TestCheckCDCSlot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := cdctest.Start(ctx, cdctest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	cfg := fmt.Sprintf(`
databases:
  main:
    dsn: %q
cdc:
  orders: {database: main, slot: debezium_orders, deadline: 1m}
`, cl.URL("postgres"))
	path := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	runCheck := func() (int, string) {
		var out, errOut syncBuffer
		code := run(context.Background(), []string{"check", "--config.file=" + path}, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	code, out := runCheck()
	if code != 1 || !strings.Contains(out, "cdc orders (slot debezium_orders): NOT OK") || !strings.Contains(out, `no replication slot "debezium_orders"`) {
		t.Fatalf("check without the slot: exit %d\n%s", code, out)
	}
	conn, err := pgx.Connect(ctx, cl.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot('debezium_orders', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	code, out = runCheck()
	if code != 0 || !strings.Contains(out, "cdc orders (slot debezium_orders): OK") || !strings.Contains(out, "check: OK") {
		t.Fatalf("check with the slot: exit %d\n%s", code, out)
	}
}
