package main

import (
	"context"
	"fmt"
	"io"

	"github.com/outbox-exporter/outbox_exporter/collectors/database"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// checkStandby says when database name is a hot standby in recovery: a
// warning, not a failure (reading a replica is a choice), but a person
// must know that every outbox age and counter read there trails the
// primary by the replay lag. A database whose state cannot be read says
// so and fails.
func checkStandby(ctx context.Context, w io.Writer, name string, db pg.Beginner) bool {
	st, err := database.Read(ctx, db)
	if err != nil {
		fmt.Fprintf(w, "database %s: FAIL %v\n", name, err)
		return false
	}
	if st.InRecovery {
		fmt.Fprintf(w, "database %s: WARNING reads %s (see outbox_database_replay_lag_seconds)\n", name, st.Describe())
	}
	return true
}
