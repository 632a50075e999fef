package vocab

// Metric names of a Kafka consumer group.
const (
	ConsumerLagMessages          = "outbox_consumer_lag_messages"
	ConsumerLagSeconds           = "outbox_consumer_lag_seconds"
	ConsumerDeadline             = "outbox_consumer_deadline_seconds"
	ConsumerGroupMembers         = "outbox_consumer_group_members"
	ConsumerRetentionLost        = "outbox_consumer_retention_lost_messages"
	ConsumerGroupInfo            = "outbox_consumer_group_info"
	ConsumerUncommitted          = "outbox_consumer_uncommitted_partitions"
	ConsumerPartitionLagMessages = "outbox_consumer_partition_lag_messages"
	ConsumerPartitionLagSeconds  = "outbox_consumer_partition_lag_seconds"
)

// Metric names of a Kafka share group.
const (
	ShareGroupLagMessages = "outbox_share_group_lag_messages"
	ShareGroupLagSeconds  = "outbox_share_group_lag_seconds"
	ShareGroupMembers     = "outbox_share_group_members"
	ShareGroupInfo        = "outbox_share_group_info"
)

// Metric names of a CDC replication slot.
const (
	CDCSlotLagBytes      = "outbox_cdc_slot_lag_bytes"
	CDCSlotLagSeconds    = "outbox_cdc_slot_lag_seconds"
	CDCSlotLagLowerBound = "outbox_cdc_slot_lag_lower_bound"
	CDCSlotLagUpperBound = "outbox_cdc_slot_lag_upper_bound"
	CDCSlotActive        = "outbox_cdc_slot_active"
	CDCSlotWALStatus     = "outbox_cdc_slot_wal_status"
	CDCSlotSafeWALSize   = "outbox_cdc_slot_safe_wal_size_bytes"
	CDCSlotMissing       = "outbox_cdc_slot_missing"
	CDCDeadline          = "outbox_cdc_deadline_seconds"

	// CDCSlotLagAtLeastSeconds is the other side of CDCSlotLagSeconds:
	// the least the lag can be.
	CDCSlotLagAtLeastSeconds = "outbox_cdc_slot_lag_at_least_seconds"
)

// Metric names of a monitored database.
const (
	DatabaseInRecovery = "outbox_database_in_recovery"
	DatabaseReplayLag  = "outbox_database_replay_lag_seconds"
)

// Metric names of a reconcile job's runs and schedule. The interval is a
// setting exported as a series, like the objective below, so that one rule
// file serves every config: a rule reads each threshold from the series of
// the thing it judges.
const (
	ReconcileDuration = "outbox_reconcile_duration_seconds"
	ReconcileRunning  = "outbox_reconcile_running_seconds"
	ReconcileInterval = "outbox_reconcile_interval_seconds"
)

// Metric names of a publish audit beyond its findings.
const (
	AuditDeadInBroker     = "outbox_audit_dead_in_broker_events"
	AuditWindow           = "outbox_audit_window_seconds"
	AuditMalformedRecords = "outbox_audit_malformed_records_total"
	AuditOrderInversions  = "outbox_audit_order_inversions_total"
)

// Metric name of an outbox's publish objective, a setting exported as a
// series for the rules.
const SLOObjective = "outbox_slo_objective"

// Metric names of the exporter's own state.
const (
	ExporterLeader          = "outbox_exporter_leader"
	ExporterBuildInfo       = "outbox_exporter_build_info"
	ConfigReloadSuccessful  = "outbox_exporter_config_last_reload_successful"
	ConfigReloadSuccessTime = "outbox_exporter_config_last_reload_success_timestamp_seconds"
)

// Label names of the Kafka, CDC, database and leader series.
const (
	LabelCluster   = "cluster"
	LabelGroup     = "group"
	LabelTopic     = "topic"
	LabelPartition = "partition"
	LabelCDC       = "cdc"
	LabelDatabase  = "database"
	LabelTask      = "task"
)
