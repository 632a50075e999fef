package config

import (
	"strings"
	"testing"
)

func TestCheckPredicate(t *testing.T) {
	for _, ok := range []string{
		"tenant = 'a'",
		"tenant = 'it''s ) ('",
		`"odd)name" = 1`,
		`"odd""(" = 1`,
		"payload ->> 'k' = E'\\') ('",
		"note = $$ ) ; ( $$",
		"note = $tag$ $$ ) $tag$",
		"a$b$ = 1",
		"x = $1",
		"/* ) ; /* nested ( */ */ x = 1",
		"x = 1 -- a note ) ;\n AND y = 2",
		"(a OR b) AND ((c))",
		"U&'d\\0061t\\+000061' = 'x)'",
		"lower(e) = 'x'",
		"status IN ('a', 'b')",
	} {
		if err := CheckPredicate(ok); err != nil {
			t.Errorf("CheckPredicate(%q) = %v, want nil", ok, err)
		}
	}
	for bad, want := range map[string]string{
		"x = 1) OR (true":                  "')' without '('",
		"x = 1 OR true --":                 "'--' comment",
		"x = 1 -- swallow )":               "'--' comment",
		"x = 1; DELETE FROM outbox":        "';'",
		"(x = 1":                           "'(' without ')'",
		"x = 'open":                        "unterminated string",
		"x = E'\\'":                        "unterminated string",
		`"open = 1`:                        "unterminated quoted identifier",
		"x = $q$ open":                     "unterminated dollar-quoted",
		"/* open":                          "unterminated /* comment",
		"/* a /* b */ x = 1":               "unterminated /* comment",
		"  /* only a comment */ ":          "is empty",
		"x = 1)) OR ((true":                "')' without '('",
		"set_config('a','b',false) = '1')": "')' without '('",
	} {
		err := CheckPredicate(bad)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckPredicate(%q) = %v, want an error with %q", bad, err, want)
		}
	}
}

func TestPredicateValidation(t *testing.T) {
	cfg := base + "    filter: \"x = 1) OR (true\"\n    unknown_when: \"attempts > 3 --\"\n"
	_, err := Parse([]byte(cfg), env(nil))
	if err == nil {
		t.Fatal("escaping predicates accepted")
	}
	for _, want := range []string{"outboxes.messages.filter: must be one SQL predicate", "outboxes.messages.unknown_when: must be one SQL predicate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestTimeoutsBelowOneMillisecond(t *testing.T) {
	cfg := strings.Replace(base, "    dsn: postgres://exporter@127.0.0.1/app\n",
		"    dsn: postgres://exporter@127.0.0.1/app\n    statement_timeout: 500us\n    lock_timeout: 1ns\n", 1)
	_, err := Parse([]byte(cfg), env(nil))
	if err == nil {
		t.Fatal("sub-millisecond timeouts accepted")
	}
	for _, want := range []string{"databases.main.statement_timeout: must be at least 1ms", "databases.main.lock_timeout: must be at least 1ms"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	ok := strings.Replace(cfg, "500us", "1ms", 1)
	ok = strings.Replace(ok, "1ns", "2ms", 1)
	if _, err := Parse([]byte(ok), env(nil)); err != nil {
		t.Errorf("1ms and 2ms refused: %v", err)
	}
}

func TestDSNValidation(t *testing.T) {
	cfg := strings.Replace(base, "postgres://exporter@127.0.0.1/app", "postgres://exporter:Zq1/Wv2@127.0.0.1/app", 1)
	_, err := Parse([]byte(cfg), env(nil))
	if err == nil || !strings.Contains(err.Error(), "databases.main.dsn: does not parse") {
		t.Fatalf("a URL with an unencoded '/' in its password: %v", err)
	}
	if strings.Contains(err.Error(), "Wv2") || strings.Contains(err.Error(), "Zq1") {
		t.Errorf("the error quotes the password: %v", err)
	}
}

func TestStatementHeads(t *testing.T) {
	for sql, want := range map[string]string{
		"SELECT 1":                                 "select",
		"SELECT 1;":                                "select",
		"SELECT 1; -- done":                        "select",
		"SELECT ';' || $$;x$$":                     "select",
		"SELECT 1; COMMIT":                         "select commit",
		"SET LOCAL a = 1;SET LOCAL b = 2; end":     "set set end",
		`SELECT "a;b"; Rollback`:                   "select rollback",
		"/* ; */ select 1 ; /* */ BEGIN; (select)": "select begin ",
	} {
		if got := strings.Join(StatementHeads(sql), " "); got != want {
			t.Errorf("StatementHeads(%q) = %q, want %q", sql, got, want)
		}
	}
}
