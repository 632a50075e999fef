package libraries

import "testing"

// TestFixturesAreTheLibrariesOwn: each fixture taken from a library's jar
// is that jar's file, byte for byte below its origin comment, so that the
// tables the presets are proven on are the ones the libraries create.
func TestFixturesAreTheLibrariesOwn(t *testing.T) {
	for _, f := range []struct{ fixture, jar, entry string }{
		{"spring-modulith-1.sql", "spring-modulith-events-jdbc-2.0.3.jar", "org/springframework/modulith/events/jdbc/schemas/v1/schema-postgresql.sql"},
		{"spring-modulith-2.sql", "spring-modulith-events-jdbc-2.0.3.jar", "org/springframework/modulith/events/jdbc/schemas/v2/schema-postgresql.sql"},
		{"namastack.sql", "namastack-outbox-jdbc-1.6.0.jar", "schema/postgres/outbox-tables.sql"},
		{"eventuate-tram.sql", "eventuate-common-flyway-0.21.0.RELEASE.jar", "flyway-templates/postgresql/3.create-message-table.sql"},
	} {
		if got, want := fixtureBody(readFixture(t, f.fixture)), jarEntry(t, f.jar, f.entry); got != want {
			t.Errorf("testdata/%s differs from %s in %s", f.fixture, f.entry, f.jar)
		}
	}
}
