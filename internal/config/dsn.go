package config

import (
	"errors"
	"net/url"
	"strings"
)

// A DSN is parsed here with the grammar pgconn (and libpq) use, without
// pgconn.ParseConfig's side effects (environment, service and password
// files, TLS files): the redacted form is rebuilt from the parsed parts,
// so no byte of a secret can survive by being where a regular expression
// did not look.

// dsnParam is one parameter of a DSN, in the order written.
type dsnParam struct{ key, val string }

// parsedDSN is a DSN split into its parts.
type parsedDSN struct {
	url         bool
	scheme      string
	user        string
	hasPassword bool
	hosts       string // URL netloc list, raw
	dbname      string // URL path, decoded
	hasDB       bool
	params      []dsnParam // key=value pairs, or the URL's query
}

// unparsedDSN stands in for a DSN that does not parse: its bytes may put a
// secret anywhere, so none of them is shown.
const unparsedDSN = "(connection string not shown: it does not parse)"

const mask = "xxxxx"

// secretDSNKey reports whether a libpq parameter carries a secret:
// password, sslpassword (the TLS key's passphrase), and, for parameters
// newer libpq versions add (oauth_client_secret, ...), anything named like
// a secret.
func secretDSNKey(k string) bool {
	k = strings.ToLower(k)
	for _, s := range []string{"password", "passphrase", "secret", "token", "credential"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// RedactDSN returns a libpq URL or key=value DSN with every secret-bearing
// parameter masked, fit for a log line or an error message. A DSN that
// does not parse, or whose parts are ambiguous (an unencoded '/' or '?' in
// a URL password strands it in the host, port or path), is not shown.
func RedactDSN(dsn string) string {
	if dsn == "" {
		return ""
	}
	d, err := parseDSN(dsn)
	if err != nil {
		return unparsedDSN
	}
	return d.redacted()
}

// DSNProblem says why a DSN does not parse, without quoting any of it; ""
// if it parses.
func DSNProblem(dsn string) string {
	if _, err := parseDSN(dsn); err != nil {
		return err.Error()
	}
	return ""
}

func parseDSN(s string) (*parsedDSN, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, errors.New("holds a NUL byte")
	}
	for _, scheme := range []string{"postgresql://", "postgres://"} {
		if rest, ok := strings.CutPrefix(s, scheme); ok {
			return parseURLDSN(scheme, rest)
		}
	}
	if strings.Contains(s, "://") {
		return nil, errors.New("a URL must start with postgres:// or postgresql://")
	}
	params, err := parseKeyValueDSN(s)
	if err != nil {
		return nil, err
	}
	return &parsedDSN{params: params}, nil
}

const dsnSpace = " \t\n\r\v\f"

// parseKeyValueDSN follows libpq's conninfo grammar: key = value pairs,
// a value either single-quoted or ending at white space, '\' escaping the
// next byte in both.
func parseKeyValueDSN(s string) ([]dsnParam, error) {
	var out []dsnParam
	s = strings.TrimLeft(s, dsnSpace)
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return nil, errors.New(`a key=value connection string has a word without "="`)
		}
		key := strings.Trim(s[:eq], dsnSpace)
		if key == "" || strings.ContainsAny(key, dsnSpace) {
			return nil, errors.New(`a key=value connection string has a word without "=" (quote values holding spaces: password='a b')`)
		}
		s = strings.TrimLeft(s[eq+1:], dsnSpace)
		var val strings.Builder
		switch {
		case s == "":
		case s[0] == '\'':
			i := 1
			for ; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' {
					i++
					if i == len(s) {
						break
					}
				}
				val.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New("a key=value connection string has an unterminated quoted value")
			}
			s = s[i+1:]
		default:
			i := 0
			for ; i < len(s) && !strings.ContainsRune(dsnSpace, rune(s[i])); i++ {
				if s[i] == '\\' {
					i++
					if i == len(s) {
						break
					}
				}
				val.WriteByte(s[i])
			}
			s = s[min(i, len(s)):]
		}
		out = append(out, dsnParam{key, val.String()})
		s = strings.TrimLeft(s, dsnSpace)
	}
	return out, nil
}

// parseURLDSN follows libpq's URI grammar: userinfo only when an '@'
// comes before the first '/', then a comma-separated host[:port] list, an
// optional /dbname and ?query.
func parseURLDSN(scheme, p string) (*parsedDSN, error) {
	d := &parsedDSN{url: true, scheme: scheme}
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		user, _, hasPassword := strings.Cut(p[:i], ":")
		u, err := url.PathUnescape(user)
		if err != nil {
			return nil, errors.New("the URL's user name has a bad %-escape")
		}
		d.user, d.hasPassword = u, hasPassword
		p = p[i+1:]
	}
	end := strings.IndexAny(p, "/?")
	if end < 0 {
		end = len(p)
	}
	d.hosts, p = p[:end], p[end:]
	if err := checkNetlocs(d.hosts); err != nil {
		return nil, err
	}
	if rest, ok := strings.CutPrefix(p, "/"); ok {
		db, q, _ := strings.Cut(rest, "?")
		dec, err := url.PathUnescape(db)
		if err != nil {
			return nil, errors.New("the URL's database name has a bad %-escape")
		}
		d.dbname, d.hasDB = dec, true
		if q != "" || strings.Contains(rest, "?") {
			p = "?" + q
		} else {
			p = ""
		}
	}
	if strings.Contains(d.hosts, "@") || strings.Contains(d.dbname, "@") {
		// An '@' after the host list means the userinfo was cut short by an
		// unencoded '/' in the password: what looks like a host, port or
		// database may be part of it.
		return nil, errors.New("the URL has an '@' after its host: percent-encode '/', '?', '#' and '@' in the user name and password (%2F, %3F, %23, %40)")
	}
	if q, ok := strings.CutPrefix(p, "?"); ok && q != "" {
		for pair := range strings.SplitSeq(q, "&") {
			k, v, _ := strings.Cut(pair, "=")
			// libpq decodes only %-escapes here, not '+'.
			dk, err1 := url.PathUnescape(k)
			dv, err2 := url.PathUnescape(v)
			if err1 != nil || err2 != nil {
				return nil, errors.New("the URL's query has a bad %-escape")
			}
			if strings.Contains(dk, "@") || (strings.Contains(dv, "@") && !secretDSNKey(dk)) {
				return nil, errors.New("the URL has an '@' in its query: percent-encode '/', '?', '#' and '@' in the user name and password (%2F, %3F, %23, %40)")
			}
			d.params = append(d.params, dsnParam{dk, dv})
		}
	}
	return d, nil
}

// checkNetlocs refuses a host list whose ports are not numbers: a
// password with an unencoded '/' lands there (postgres://u:pass/word@h).
func checkNetlocs(hosts string) error {
	for h := range strings.SplitSeq(hosts, ",") {
		port := ""
		if strings.HasPrefix(h, "[") {
			end := strings.IndexByte(h, ']')
			if end < 0 {
				return errors.New(`the URL has an IPv6 host without "]"`)
			}
			port = strings.TrimPrefix(h[end+1:], ":")
			if h[end+1:] != "" && !strings.HasPrefix(h[end+1:], ":") {
				return errors.New("the URL has text after an IPv6 host")
			}
		} else if _, pt, ok := strings.Cut(h, ":"); ok {
			port = pt
		}
		for _, c := range port {
			if c < '0' || c > '9' {
				return errors.New("the URL has a port that is not a number (percent-encode '/' in a password as %2F)")
			}
		}
	}
	return nil
}

// knownDSNKeys are the parameters libpq and pgx define. A redacted DSN
// shows only these: an unknown key may be the tail of a password that held
// an unencoded '&' or an unquoted space (password=a b=c).
var knownDSNKeys = map[string]bool{
	"host": true, "hostaddr": true, "port": true, "dbname": true, "database": true, "user": true,
	"passfile": true, "channel_binding": true, "connect_timeout": true, "client_encoding": true,
	"options": true, "application_name": true, "fallback_application_name": true,
	"keepalives": true, "keepalives_idle": true, "keepalives_interval": true, "keepalives_count": true,
	"tcp_user_timeout": true, "replication": true, "gssencmode": true, "sslmode": true,
	"sslnegotiation": true, "sslcompression": true, "sslcert": true, "sslkey": true, "sslcertmode": true,
	"sslrootcert": true, "sslcrl": true, "sslcrldir": true, "sslsni": true, "requirepeer": true,
	"ssl_min_protocol_version": true, "ssl_max_protocol_version": true, "krbsrvname": true,
	"gsslib": true, "gssdelegation": true, "service": true, "target_session_attrs": true,
	"load_balance_hosts": true, "require_auth": true, "min_protocol_version": true,
	"max_protocol_version": true, "ssl": true, "search_path": true, "timezone": true,
	"statement_cache_capacity": true, "description_cache_capacity": true, "default_query_exec_mode": true,
	"pool_max_conns": true, "pool_min_conns": true, "pool_max_conn_lifetime": true,
	"pool_max_conn_idle_time": true, "pool_health_check_period": true,
}

// shown reports whether a parameter appears in the redacted form.
func shown(k string) bool { return knownDSNKeys[k] || secretDSNKey(k) }

func (d *parsedDSN) redacted() string {
	var b strings.Builder
	if !d.url {
		n := 0
		for _, p := range d.params {
			if !shown(p.key) {
				continue
			}
			if n > 0 {
				b.WriteByte(' ')
			}
			n++
			b.WriteString(p.key + "=")
			if secretDSNKey(p.key) {
				b.WriteString(mask)
			} else {
				b.WriteString(quoteKV(p.val))
			}
		}
		return b.String()
	}
	b.WriteString(d.scheme)
	if d.user != "" || d.hasPassword {
		b.WriteString(url.PathEscape(d.user))
		if d.hasPassword {
			b.WriteString(":" + mask)
		}
		b.WriteByte('@')
	}
	b.WriteString(d.hosts)
	if d.hasDB {
		b.WriteString("/" + url.PathEscape(d.dbname))
	}
	n := 0
	for _, p := range d.params {
		if !shown(p.key) {
			continue
		}
		b.WriteByte("?&"[min(n, 1)])
		n++
		b.WriteString(queryEscape(p.key) + "=")
		if secretDSNKey(p.key) {
			b.WriteString(mask)
		} else {
			b.WriteString(queryEscape(p.val))
		}
	}
	return b.String()
}

// quoteKV quotes a key=value value the way libpq reads it back.
func quoteKV(v string) string {
	if v != "" && !strings.ContainsAny(v, dsnSpace+`'\`) {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// queryEscape escapes a query part so that libpq, which does not read '+'
// as a space, reads it back.
func queryEscape(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}
