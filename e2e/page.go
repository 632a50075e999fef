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
	var (
		rows      []pageRow
		rep       PageReport
		runbook   bool
		stuckRows int
	)
	var walk func(n *html.Node, row *pageRow)
	walk = func(n *html.Node, row *pageRow) {
		if n.Type == html.ElementNode {
			if href, ok := attr(n, "href"); ok && n.Data == "a" {
				rep.Links = append(rep.Links, href)
				if strings.EqualFold(strings.TrimSpace(text(n)), "runbook") &&
					(strings.HasPrefix(href, "https://") || strings.HasPrefix(href, "http://")) {
					runbook = true
				}
			}
			if n.Data == "table" && hasClass(n, "stuck") {
				stuckRows += countCode(n)
			}
			if status, ok := attr(n, "data-status"); ok && n.Data == "tr" {
				class, _ := attr(n, "class")
				name := ""
				for _, a := range []string{"data-outbox", "data-group", "data-job"} {
					if v, ok := attr(n, a); ok {
						name = v
					}
				}
				rows = append(rows, pageRow{class: class, name: name, status: status})
				row = &rows[len(rows)-1]
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					walk(c, row)
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
			walk(c, row)
		}
	}
	walk(root, nil)

	find := func(class, name string) *pageRow {
		for i := range rows {
			if hasWord(rows[i].class, class) && rows[i].name == name {
				return &rows[i]
			}
		}
		return nil
	}
	var problems []string
	check := func(class string, names []string, trend bool, link string) {
		for _, name := range names {
			if link != "" && !slices.ContainsFunc(rep.Links, func(h string) bool {
				return strings.HasPrefix(h, link+url.QueryEscape(name))
			}) {
				problems = append(problems, fmt.Sprintf("%s %q: no link to %s", class, name, link+name))
			}
			r := find(class, name)
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
	}
	check("outbox", want.Outboxes, true, "/api/v1/stuck?outbox=")
	check("group", want.Groups, true, "")
	check("reconcile", want.Reconciles, false, "/api/v1/reconcile?job=")
	check("audit", want.Audits, false, "/api/v1/audit?outbox=")
	if !runbook {
		problems = append(problems, "no link to the runbook")
	}
	if want.Stuck && stuckRows == 0 {
		problems = append(problems, "no stuck rows listed although faults are active")
	}

	crit, drawn := 0, 0
	var parts []string
	for _, r := range rows {
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
	rep.Problems = problems
	rep.Summary = strings.Join(parts, ", ")
	return rep
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
