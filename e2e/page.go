package e2e

import (
	"bytes"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/net/html"
)

// PageWant is what the on-call page must show: a row for each of these,
// and, if Stuck, the oldest stuck rows of some outbox.
type PageWant struct {
	Outboxes   []string
	Groups     []string
	Reconciles []string
	Audits     []string
	Stuck      bool
}

// PageReport is what CheckPage found.
type PageReport struct {
	Problems []string
	// Summary lists each state row: "outbox messages=crit, ...".
	Summary string
	// Links are the href of every link, for the caller to follow.
	Links []string
}

// pageRow is one state row of the page: its class (outbox, group,
// reconcile, audit), name, data-status and whether it holds a trend.
type pageRow struct {
	class, name, status string
	trends, drawn       int
}

var statuses = []string{"ok", "warn", "crit", "unknown"}

// CheckPage checks the DOM of the page at /: each wanted outbox, consumer
// group, reconcile job and audit has a row with a valid data-status; at
// least one row is crit; each outbox and group row holds a trend SVG and
// at least one trend is drawn (not "no history yet"); the outboxes link
// to their stuck rows, the reconcile jobs and audits to their findings,
// the page to the runbook; and if want.Stuck, a table of stuck rows has
// one.
func CheckPage(dom []byte, want PageWant) PageReport {
	root, err := html.Parse(bytes.NewReader(dom))
	if err != nil {
		return PageReport{Problems: []string{fmt.Sprintf("parse the page: %v", err)}}
	}
	sc := &pageScan{}
	sc.walk(root, nil)

	var problems []string
	problems = append(problems, sc.checkRows("outbox", want.Outboxes, true, "/api/v1/stuck?outbox=")...)
	problems = append(problems, sc.checkRows("group", want.Groups, true, "")...)
	problems = append(problems, sc.checkRows("reconcile", want.Reconciles, false, "/api/v1/reconcile?job=")...)
	problems = append(problems, sc.checkRows("audit", want.Audits, false, "/api/v1/audit?outbox=")...)
	if !sc.runbook {
		problems = append(problems, "no link to the runbook")
	}
	if want.Stuck && sc.stuckRows == 0 {
		problems = append(problems, "no stuck rows listed although faults are active")
	}

	crit, drawn := 0, 0
	var parts []string
	for _, r := range sc.rows {
		if r.status == "crit" {
			crit++
		}
		drawn += r.drawn
		parts = append(parts, fmt.Sprintf("%s %s=%s", r.class, r.name, r.status))
	}
	if crit == 0 {
		problems = append(problems, "no row is crit although faults are active")
	}
	if drawn == 0 && len(want.Outboxes)+len(want.Groups) > 0 {
		problems = append(problems, "no trend SVG draws any history")
	}
	return PageReport{Problems: problems, Summary: strings.Join(parts, ", "), Links: sc.links}
}

// pageScan is what one walk over the page's DOM collects.
type pageScan struct {
	rows      []pageRow
	links     []string
	runbook   bool
	stuckRows int
}

// walk visits n and its children; row is the state row they stand in,
// if any.
func (sc *pageScan) walk(n *html.Node, row *pageRow) {
	if n.Type == html.ElementNode {
		if href, ok := attr(n, "href"); ok && n.Data == "a" {
			sc.links = append(sc.links, href)
			if strings.EqualFold(strings.TrimSpace(text(n)), "runbook") &&
				(strings.HasPrefix(href, "https://") || strings.HasPrefix(href, "http://")) {
				sc.runbook = true
			}
		}
		if n.Data == "table" && hasClass(n, "stuck") {
			sc.stuckRows += countCode(n)
		}
		if status, ok := attr(n, "data-status"); ok && n.Data == "tr" {
			class, _ := attr(n, "class")
			name := ""
			for _, a := range []string{"data-outbox", "data-group", "data-job"} {
				if v, ok := attr(n, a); ok {
					name = v
				}
			}
			sc.rows = append(sc.rows, pageRow{class: class, name: name, status: status})
			row = &sc.rows[len(sc.rows)-1]
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				sc.walk(c, row)
			}
			return
		}
		if n.Data == "svg" && row != nil && hasClass(n, "trend") {
			row.trends++
			if label, _ := attr(n, "aria-label"); label != "no history yet" {
				row.drawn++
			}
		}
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		sc.walk(c, row)
	}
}

// find returns the row of that class and name, or nil.
func (sc *pageScan) find(class, name string) *pageRow {
	for i := range sc.rows {
		if hasWord(sc.rows[i].class, class) && sc.rows[i].name == name {
			return &sc.rows[i]
		}
	}
	return nil
}

// checkRows returns what is wrong with the rows of class for names: a
// missing link (when link is set), a missing row, an invalid data-status,
// a missing trend (when trend is set).
func (sc *pageScan) checkRows(class string, names []string, trend bool, link string) []string {
	var problems []string
	for _, name := range names {
		if link != "" && !slices.ContainsFunc(sc.links, func(h string) bool {
			return strings.HasPrefix(h, link+url.QueryEscape(name))
		}) {
			problems = append(problems, fmt.Sprintf("%s %q: no link to %s", class, name, link+name))
		}
		r := sc.find(class, name)
		switch {
		case r == nil:
			problems = append(problems, fmt.Sprintf("no %s row for %q", class, name))
			continue
		case !slices.Contains(statuses, r.status):
			problems = append(problems, fmt.Sprintf("%s %q: data-status %q is not one of %v", class, name, r.status, statuses))
		}
		if trend && r.trends == 0 {
			problems = append(problems, fmt.Sprintf("%s %q: no trend SVG", class, name))
		}
	}
	return problems
}

// text returns the text inside n.
func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// countCode counts the <code> elements (row ids) inside n.
func countCode(n *html.Node) int {
	count := 0
	if n.Type == html.ElementNode && n.Data == "code" {
		count++
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		count += countCode(c)
	}
	return count
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func hasClass(n *html.Node, class string) bool {
	v, _ := attr(n, "class")
	return hasWord(v, class)
}

func hasWord(list, word string) bool {
	return slices.Contains(strings.Fields(list), word)
}
