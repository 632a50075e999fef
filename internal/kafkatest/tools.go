package kafkatest

import (
	"context"
	"strconv"
	"strings"
)

// LagRow is one partition row of Kafka's own describe tools: a group's
// offset and LAG on a partition. OffsetOK and LagOK are false where the
// tool prints "-" (no committed offset).
type LagRow struct {
	Group, Topic string
	Partition    int32
	Offset       int64
	OffsetOK     bool
	Lag          int64
	LagOK        bool
}

// ConsumerGroupLag runs Kafka's ConsumerGroupCommand --describe on groups
// and returns its partition rows (CURRENT-OFFSET, LAG).
func (b *Broker) ConsumerGroupLag(ctx context.Context, groups ...string) ([]LagRow, string, error) {
	args := []string{"--bootstrap-server", b.addr, "--describe"}
	for _, g := range groups {
		args = append(args, "--group", g)
	}
	out, err := b.RunTool(ctx, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", args...)
	if err != nil {
		return nil, out, err
	}
	return parseLagTable(out, "CURRENT-OFFSET"), out, nil
}

// ShareGroupLag runs Kafka's ShareGroupCommand --describe on groups and
// returns its partition rows (START-OFFSET, LAG).
func (b *Broker) ShareGroupLag(ctx context.Context, groups ...string) ([]LagRow, string, error) {
	args := []string{"--bootstrap-server", b.addr, "--describe"}
	for _, g := range groups {
		args = append(args, "--group", g)
	}
	out, err := b.RunTool(ctx, "org.apache.kafka.tools.consumer.group.ShareGroupCommand", args...)
	if err != nil {
		return nil, out, err
	}
	return parseLagTable(out, "START-OFFSET"), out, nil
}

// parseLagTable reads the tables the describe tools print: a header line
// starting with GROUP, then rows of as many fields.
func parseLagTable(out, offsetCol string) []LagRow {
	var (
		rows []LagRow
		cols []string
	)
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "GROUP" {
			cols = f
			continue
		}
		if cols == nil || len(f) != len(cols) {
			continue
		}
		row := map[string]string{}
		for i, c := range cols {
			row[c] = f[i]
		}
		p, err := strconv.Atoi(row["PARTITION"])
		if err != nil {
			continue
		}
		r := LagRow{Group: row["GROUP"], Topic: row["TOPIC"], Partition: int32(p)}
		if v, err := strconv.ParseInt(row[offsetCol], 10, 64); err == nil {
			r.Offset, r.OffsetOK = v, true
		}
		if v, err := strconv.ParseInt(row["LAG"], 10, 64); err == nil {
			r.Lag, r.LagOK = v, true
		}
		rows = append(rows, r)
	}
	return rows
}
