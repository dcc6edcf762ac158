// Package markdown reads the headings of the project's Markdown documents and the anchors a
// renderer gives them, for the tests that check references and links into those documents
// (docs/design.md's sections, docs/runbook.md's alerts). It knows only what those documents
// use: ATX headings ("## 4. Scanner") outside fenced code blocks.
package markdown

import (
	"strings"
	"unicode"
)

// Heading is one heading of a document.
type Heading struct {
	Level  int    // 1 for "#", 6 for "######"
	Title  string // the text after the marks, trimmed
	Anchor string // the link anchor of the title (Anchor)
	Line   int    // 1-based
}

// Headings returns the headings of text in order: lines of one to six '#' and a space,
// outside fenced code blocks (``` or ~~~, closed by a fence of the same kind).
func Headings(text string) []Heading {
	var out []Heading
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if f := fenceOf(trimmed); f != "" {
			switch {
			case fence == "":
				fence = f
			case f == fence:
				fence = ""
			}
			continue
		}
		if fence != "" || !strings.HasPrefix(line, "#") {
			continue
		}
		level := len(line) - len(strings.TrimLeft(line, "#"))
		if level > 6 || level == len(line) || line[level] != ' ' {
			continue
		}
		title := strings.TrimSpace(line[level:])
		if title == "" {
			continue
		}
		out = append(out, Heading{Level: level, Title: title, Anchor: Anchor(title), Line: i + 1})
	}
	return out
}

// fenceOf returns the fence a trimmed line opens or closes, "" for any other line.
func fenceOf(trimmed string) string {
	for _, f := range []string{"```", "~~~"} {
		if strings.HasPrefix(trimmed, f) {
			return f
		}
	}
	return ""
}

// Anchor is the anchor GitHub's renderer gives a heading: lower case, every character but
// letters, digits, '-', '_' and spaces dropped, each space turned into '-'
// ("4.2 The walk: `scan_interval`" is "42-the-walk-scan_interval").
func Anchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Anchors returns the set of the anchors of text's headings.
func Anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, h := range Headings(text) {
		out[h.Anchor] = true
	}
	return out
}
