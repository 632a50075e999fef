package main

import (
	"context"
	"fmt"

	"github.com/outbox-exporter/outbox_exporter/collectors/database"
	"github.com/outbox-exporter/outbox_exporter/internal/checktext"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// checkStandby warns when the database is a hot standby in recovery: a
// warning, not a failure (reading a replica is a choice), but a person
// must know that every outbox age and counter read there trails the
// primary by the replay lag. A database whose state cannot be read says
// so and fails.
func checkStandby(ctx context.Context, r *checktext.Report, db pg.Beginner) {
	st, err := database.Read(ctx, db)
	if err != nil {
		r.OK = false
		r.Items = append(r.Items, checktext.Item{What: "recovery state", Detail: err.Error()})
		return
	}
	if st.InRecovery {
		r.Items = append(r.Items, checktext.Item{What: "standby", OK: true, Warn: true,
			Detail: fmt.Sprintf("reads %s (see outbox_database_replay_lag_seconds)", st.Describe())})
	}
}
