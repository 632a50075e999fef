// Package replicas holds the test that runs several exporter processes
// with leader_election against the real PostgreSQL server: one replica
// runs each reconcile job, another takes over when the leader is killed,
// its lease session terminated or cut off from the server, and no two
// lead one task at once. It has no code of its own.
package replicas
