package pgcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// StartStandby starts a hot standby of primary: pg_basebackup -R (a base
// backup that writes standby.signal and primary_conninfo) into a new
// temporary folder, then postgres on it, streaming from primary. It
// returns once the standby accepts connections. primary must allow
// replication connections from 127.0.0.1, as a cluster from Start does
// (initdb -A trust).
func StartStandby(ctx context.Context, primary *Cluster, o Options) (c *Cluster, err error) {
	if o.Prefix == "" {
		o.Prefix = "outbox-pg-standby-"
	}
	bin, as, dir, err := prepare(o.Prefix)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	data := filepath.Join(dir, "data")
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pg_basebackup"), "-D", data, "-R", "-X", "stream",
		"--no-sync", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port), "-U", "postgres")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &out, &out
	as.apply(cmd, dir)
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("pg_basebackup: %w: %s", err, LastLines(out.String(), 5))
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	if o.Settings == nil {
		o.Settings = map[string]string{}
	}
	if _, ok := o.Settings["hot_standby"]; !ok {
		o.Settings["hot_standby"] = "on"
	}
	c, err = startServer(bin, dir, data, port, o, as)
	if err != nil {
		return nil, err
	}
	if err := c.wait(ctx, 90*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}
