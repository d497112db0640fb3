// Package htmltest reads HTML pages in tests: parse a page, find elements,
// read their attributes and text (the status pages' tests check the DOM a
// browser builds, not the markup's spelling).
package htmltest

import (
	"bytes"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// Parse parses an HTML page.
func Parse(t testing.TB, page []byte) *html.Node {
	t.Helper()
	n, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("parsing the page: %v", err)
	}
	return n
}

// FindAll returns the elements under n for which match holds, in document order.
func FindAll(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for c := range n.Descendants() {
		if c.Type == html.ElementNode && match(c) {
			out = append(out, c)
		}
	}
	return out
}

// HasAttr matches elements with attribute key (any value).
func HasAttr(key string) func(*html.Node) bool {
	return func(n *html.Node) bool { _, ok := Attr(n, key); return ok }
}

// Attr is n's attribute key, and whether it has one.
func Attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

// AttrOf is n's attribute key, "" when it has none.
func AttrOf(n *html.Node, key string) string { v, _ := Attr(n, key); return v }

// Text is n's text content.
func Text(n *html.Node) string {
	var b strings.Builder
	for c := range n.Descendants() {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	}
	return b.String()
}

// ByAttr indexes elements by one attribute's value.
func ByAttr(ns []*html.Node, key string) map[string]*html.Node {
	out := map[string]*html.Node{}
	for _, n := range ns {
		out[AttrOf(n, key)] = n
	}
	return out
}
