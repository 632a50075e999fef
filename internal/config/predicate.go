package config

import (
	"errors"
	"fmt"
	"strings"
)

// CheckPredicate reads an SQL predicate from the configuration (filter,
// unknown_when) with PostgreSQL's lexical rules and refuses what could
// reach outside the parentheses the queries wrap it in: a ';', a ')'
// without its '(' or a '(' left open, a line comment that would swallow
// the closing parenthesis, and an unterminated string, quoted identifier,
// dollar-quoted string or block comment. Whether the text is one boolean
// expression only the server can tell: check prepares every query.
//
// No pure-Go PostgreSQL parser is kept well enough to depend on (the
// maintained one, pg_query_go, needs cgo, and the release build is
// static), and the lexical level is all the fence needs: outside literals
// and comments, parentheses decide where an expression ends.
func CheckPredicate(s string) error {
	lx := lexer{s: s}
	depth, tokens := 0, 0
	for {
		tok, err := lx.next()
		if err != nil {
			return err
		}
		switch tok {
		case tokEOF:
			if depth > 0 {
				return fmt.Errorf("has %d '(' without ')'", depth)
			}
			if tokens == 0 {
				return errors.New("is empty")
			}
			return nil
		case tokComment:
			continue
		case '(':
			depth++
		case ')':
			depth--
			if depth < 0 {
				return fmt.Errorf("has a ')' without '(' at byte %d: a predicate cannot close the query's own parenthesis", lx.pos)
			}
		case ';':
			return fmt.Errorf("has a ';' at byte %d: it must be one SQL predicate", lx.pos)
		}
		tokens++
	}
}

const (
	tokEOF     = -1
	tokComment = -2
	tokOther   = -3
)

type lexer struct {
	s   string
	i   int // next byte
	pos int // where the last token began, 1-based
	// ident is the identifier or keyword just read, to tell E'...' and
	// U&'...' strings and a$b identifiers from the rest.
	ident string
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' || c == '$' }

// next returns the next token: '(', ')', ';', tokOther for anything
// else, tokComment, or tokEOF.
func (lx *lexer) next() (int, error) {
	s := lx.s
	for lx.i < len(s) && strings.IndexByte(" \t\n\r\f\v", s[lx.i]) >= 0 {
		lx.i++
	}
	lx.pos = lx.i + 1
	if lx.i >= len(s) {
		return tokEOF, nil
	}
	prev := lx.ident
	lx.ident = ""
	c := s[lx.i]
	switch {
	case strings.HasPrefix(s[lx.i:], "--"):
		end := strings.IndexByte(s[lx.i:], '\n')
		if end < 0 {
			return 0, fmt.Errorf("has a '--' comment at byte %d that runs to its end, where it would comment out the rest of the query", lx.pos)
		}
		lx.i += end + 1
		return tokComment, nil
	case strings.HasPrefix(s[lx.i:], "/*"):
		return tokComment, lx.blockComment()
	case c == '\'':
		lower := strings.ToLower(prev)
		return tokOther, lx.quoted('\'', lower == "e" && lx.adjacent(1))
	case c == '"':
		return tokOther, lx.quoted('"', false)
	case c == '$' && lx.i+1 < len(s) && (s[lx.i+1] == '$' || isIdentStart(s[lx.i+1])):
		return tokOther, lx.dollar()
	case isIdentStart(c):
		start := lx.i
		for lx.i < len(s) && isIdentChar(s[lx.i]) {
			lx.i++
		}
		lx.ident = s[start:lx.i]
		if strings.EqualFold(lx.ident, "u") && strings.HasPrefix(s[lx.i:], "&") {
			lx.i++ // U&'...' and U&"...": the quote follows
		}
		return tokOther, nil
	case c == '(' || c == ')' || c == ';':
		lx.i++
		return int(c), nil
	}
	lx.i++
	return tokOther, nil
}

// adjacent reports whether the identifier just before the current byte
// ended right there (E'...', not E '...').
func (lx *lexer) adjacent(n int) bool {
	return lx.i >= n && isIdentStart(lx.s[lx.i-n])
}

// quoted skips a '...' string or "..." identifier, where a doubled quote
// is one quote and, in an E'...' string, '\' escapes the next byte.
func (lx *lexer) quoted(q byte, backslash bool) error {
	start := lx.pos
	s := lx.s
	for lx.i++; lx.i < len(s); lx.i++ {
		switch {
		case backslash && s[lx.i] == '\\':
			lx.i++
		case s[lx.i] == q && lx.i+1 < len(s) && s[lx.i+1] == q:
			lx.i++
		case s[lx.i] == q:
			lx.i++
			return nil
		}
	}
	what := "string"
	if q == '"' {
		what = "quoted identifier"
	}
	return fmt.Errorf("has an unterminated %s starting at byte %d", what, start)
}

// dollar skips a $tag$...$tag$ string.
func (lx *lexer) dollar() error {
	start := lx.pos
	s := lx.s
	j := lx.i + 1
	for j < len(s) && s[j] != '$' && isIdentChar(s[j]) {
		j++
	}
	if j >= len(s) || s[j] != '$' {
		// $name without a closing '$' is not a dollar quote; PostgreSQL
		// has no such token either, so let the server say so.
		lx.i = j
		return nil
	}
	tag := s[lx.i : j+1]
	end := strings.Index(s[j+1:], tag)
	if end < 0 {
		return fmt.Errorf("has an unterminated dollar-quoted string %s starting at byte %d", tag, start)
	}
	lx.i = j + 1 + end + len(tag)
	return nil
}

// blockComment skips a /* ... */ comment; they nest in PostgreSQL.
func (lx *lexer) blockComment() error {
	start := lx.pos
	s := lx.s
	depth := 0
	for lx.i < len(s) {
		switch {
		case strings.HasPrefix(s[lx.i:], "/*"):
			depth++
			lx.i += 2
		case strings.HasPrefix(s[lx.i:], "*/"):
			depth--
			lx.i += 2
			if depth == 0 {
				return nil
			}
		default:
			lx.i++
		}
	}
	return fmt.Errorf("has an unterminated /* comment starting at byte %d", start)
}

// StatementHeads returns the first word, lower case, of each statement in
// sql (statements split by ';' outside strings, quoted identifiers and
// comments), so that the database pools can refuse a string whose later
// statement would end the read-only transaction around it. A string that
// does not lex gives nil: the server refuses it as a whole.
func StatementHeads(sql string) []string {
	lx := lexer{s: sql + "\n"} // a statement may end in a -- comment
	var heads []string
	start := true
	for {
		tok, err := lx.next()
		if err != nil {
			return nil
		}
		switch {
		case tok == tokEOF:
			return heads
		case tok == tokComment:
		case tok == ';':
			start = true
		case start:
			heads = append(heads, strings.ToLower(lx.ident))
			start = false
		}
	}
}
