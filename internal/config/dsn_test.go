package config

import (
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// hostilePasswords hold every byte libpq's grammars treat specially. Their
// alphanumeric runs are unique, so any run found in a redacted DSN is a leak
// of part of a password.
var hostilePasswords = []string{
	"Zq1/Wv2@Xr3?Ys4#Tu5&Kk=Pn6",
	`Ab7\ Cd8'Ef9\\Gh0`,
	"Ij1 Kl2:Mn3%41Op4+Qr5",
	"St6@@Uv7//Wx8",
	"Пароль9;--Yz0*/",
	"Bb1'Cc2",
}

// dsnForms writes a password into a DSN as the libpq grammars accept it:
// percent-encoded and raw in a URL's userinfo and query, quoted with
// escapes and unquoted with escapes in key=value, for password and for
// sslpassword (the TLS key passphrase).
func dsnForms(pw string) map[string]string {
	kvq := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "'"
	kvu := regexp.MustCompile(`([\s'\\])`).ReplaceAllString(pw, `\$1`)
	return map[string]string{
		"url userinfo encoded":  "postgres://" + url.UserPassword("exporter", pw).String() + "@db.example:5432/app?sslmode=disable",
		"url userinfo raw":      "postgres://exporter:" + pw + "@db.example:5432/app",
		"url query encoded":     "postgresql://exporter@db.example/app?password=" + url.QueryEscape(pw) + "&application_name=x",
		"url query raw":         "postgresql://exporter@db.example/app?password=" + pw,
		"url sslpassword":       "postgres://exporter@db.example/app?sslmode=disable&sslpassword=" + url.QueryEscape(pw),
		"url sslpassword raw":   "postgres://db.example/app?sslpassword=" + pw,
		"kv quoted":             "host=db.example user=exporter password=" + kvq + " dbname=app",
		"kv unquoted escaped":   "host=db.example password=" + kvu + " dbname=app",
		"kv sslpassword quoted": "host=db.example sslpassword=" + kvq + " sslmode=disable",
		"kv spaces around =":    "host = db.example password = " + kvq,
		"kv unquoted raw":       "host=db.example password=" + pw + " dbname=app",
	}
}

var alnumRun = regexp.MustCompile(`[\p{L}\p{N}]{3,}`)

func TestRedactDSNHostilePasswords(t *testing.T) {
	t.Setenv("PGPASSFILE", os.DevNull)
	t.Setenv("PGSERVICEFILE", os.DevNull)
	for _, pw := range hostilePasswords {
		for form, dsn := range dsnForms(pw) {
			got := RedactDSN(dsn)
			for _, run := range alnumRun.FindAllString(pw, -1) {
				if strings.Contains(got, run) {
					t.Errorf("%s: RedactDSN(%q) = %q shows %q of the password", form, dsn, got, run)
				}
			}
			// Where pgconn reads the DSN and finds the password, the
			// redacted form still parses and keeps host and database.
			cfg, err := pgconn.ParseConfig(dsn)
			if err != nil || (cfg.Password != pw && !strings.Contains(form, "sslpassword")) {
				continue
			}
			if got == unparsedDSN {
				t.Errorf("%s: %q parses for pgconn but is not shown at all", form, dsn)
				continue
			}
			back, err := pgconn.ParseConfig(got)
			if err != nil {
				t.Errorf("%s: redacted %q does not parse: %v", form, got, err)
				continue
			}
			if back.Host != cfg.Host || back.Database != cfg.Database || back.User != cfg.User {
				t.Errorf("%s: redacted %q reads as %s@%s/%s, want %s@%s/%s", form, got, back.User, back.Host, back.Database, cfg.User, cfg.Host, cfg.Database)
			}
		}
	}
}

// TestDSNGrammarAgreesWithPgconn: the password this package finds is the
// one pgconn connects with, so masking ours masks theirs.
func TestDSNGrammarAgreesWithPgconn(t *testing.T) {
	t.Setenv("PGPASSFILE", os.DevNull)
	t.Setenv("PGSERVICEFILE", os.DevNull)
	t.Setenv("PGPASSWORD", "")
	compared := 0
	defer func() {
		if compared < 10 {
			t.Errorf("only %d DSNs compared", compared)
		}
	}()
	for _, pw := range hostilePasswords {
		for form, dsn := range dsnForms(pw) {
			cfg, perr := pgconn.ParseConfig(dsn)
			d, err := parseDSN(dsn)
			if err != nil {
				continue // not shown at all: nothing to agree on
			}
			if perr != nil {
				continue
			}
			var ours string
			for _, p := range d.params {
				if p.key == "password" {
					ours = p.val
				}
			}
			if d.url && d.hasPassword {
				ours = cfg.Password // userinfo: masked whole whatever its value
			}
			compared++
			if ours != cfg.Password {
				t.Errorf("%s: %q: we read password %q, pgconn %q", form, dsn, ours, cfg.Password)
			}
		}
	}
}

func TestDSNProblemQuotesNothing(t *testing.T) {
	for _, dsn := range []string{
		"postgres://exporter:Zq1/Wv2@db/app",
		"postgres://exporter:Xr3Ys4@db:Tu5/app",
		"host=db password='Kk9 unterminated",
		"host=db password=Ab7 Cd8",
		"mysql://u:Pn6Pn6@db/app",
	} {
		msg := DSNProblem(dsn)
		if msg == "" {
			t.Errorf("%q: no problem found", dsn)
		}
		for _, run := range regexp.MustCompile(`[A-Z][a-z][0-9]`).FindAllString(dsn, -1) {
			if strings.Contains(msg, run) {
				t.Errorf("%q: problem %q quotes %q", dsn, msg, run)
			}
		}
		if RedactDSN(dsn) != unparsedDSN {
			t.Errorf("%q: a DSN that does not parse is shown as %q", dsn, RedactDSN(dsn))
		}
	}
}

// FuzzRedactDSN: whatever the DSN, the password pgconn would connect with
// never appears in its redacted form. (The seeds run in every go test.)
func FuzzRedactDSN(f *testing.F) {
	f.Setenv("PGPASSFILE", os.DevNull)
	f.Setenv("PGSERVICEFILE", os.DevNull)
	f.Setenv("PGPASSWORD", "")
	for _, pw := range hostilePasswords {
		for _, dsn := range dsnForms(pw) {
			f.Add(dsn)
		}
	}
	f.Add("postgres://u:pa%2Fss%3Fw@h:5432,h2/db?sslpassword=abc%26def&application_name=x")
	f.Add("host=h port=5432 password = 'a b\\' c' sslpassword=\\ \\'x dbname=d")
	f.Fuzz(func(t *testing.T, dsn string) {
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			return
		}
		got := RedactDSN(dsn)
		for _, secret := range []string{cfg.Password} {
			if len(secret) < 6 || strings.Count(dsn, secret) != 1 || strings.Contains(unparsedDSN, secret) {
				continue // too short, or also elsewhere in the DSN, to call a match a leak
			}
			if strings.Contains(got, secret) {
				t.Errorf("RedactDSN(%q) = %q shows the password %q", dsn, got, secret)
			}
		}
	})
}
