package config

// Uncommitted rules of kafka.NAME.uncommitted.
const (
	UncommittedIgnore   = "ignore"
	UncommittedLogStart = "log_start"
)

func (v *validator) kafkaUncommitted(p string, k *Kafka) {
	switch k.Uncommitted {
	case "", UncommittedIgnore, UncommittedLogStart:
	default:
		v.fail(p+".uncommitted", "is not one of %s (count only committed partitions, as kminion and Burrow) or %s (count a never-committed partition from its log start)",
			UncommittedIgnore, UncommittedLogStart)
	}
}
