// Package docs holds kvcm-gc's documents; it has no code. Its tests keep the design of record,
// docs/design.md, and the references to it in step: code comments, documents and
// configuration cite it as "DESIGN §<section>" (DESIGN §8.8 is invariant 8 of §8), and every
// such reference anywhere in the tree must name a numbered heading of docs/design.md. A
// section renumbered or removed fails here, naming each reference it left dangling.
package docs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/kvcm-gc/kvcm-gc/internal/markdown"
)

// designFile is the design of record, relative to the repository root.
const designFile = "docs/design.md"

// root is the repository root (the test runs in docs/).
const root = ".."

// section is one numbered heading of the design.
type section struct {
	number string // "8", "8.8", "7.5.1"
	title  string // the heading's text
	anchor string // its link anchor, as a Markdown renderer makes it
	line   int
}

// design is the numbered headings of a design document and the anchors of all its headings.
type design struct {
	sections map[string]section
	order    []string
	anchors  map[string]bool
}

var headingNumber = regexp.MustCompile(`^(\d+(?:\.\d+)*)\.?(?:\s|$)`)

// parseDesign reads the headings of a Markdown document. A heading whose text starts with a
// section number ("8.", "8.8", "7.5.1") defines it; two headings may share neither a number
// nor an anchor.
func parseDesign(text string) (design, error) {
	d := design{sections: map[string]section{}, anchors: map[string]bool{}}
	var errs []error
	for _, h := range markdown.Headings(text) {
		if d.anchors[h.Anchor] {
			errs = append(errs, fmt.Errorf("line %d: heading %q repeats anchor #%s", h.Line, h.Title, h.Anchor))
		}
		d.anchors[h.Anchor] = true
		m := headingNumber.FindStringSubmatch(h.Title)
		if m == nil {
			continue
		}
		n := m[1]
		if prev, dup := d.sections[n]; dup {
			errs = append(errs, fmt.Errorf("line %d: section %s defined again (first at line %d)", h.Line, n, prev.line))
			continue
		}
		d.sections[n] = section{number: n, title: h.Title, anchor: h.Anchor, line: h.Line}
		d.order = append(d.order, n)
	}
	return d, errors.Join(errs...)
}

// ref is one reference to a section of the design found in a file.
type ref struct {
	line    int
	section string // "" when only the form is wrong
	text    string // the reference as written
	// problem is set when the form is wrong, whatever the section.
	problem string
}

var (
	sectionNumber = regexp.MustCompile(`^\d+(?:\.\d+)*`)
	moreSections  = regexp.MustCompile(`^(?:[–—-]|, ?| and )§(\d+(?:\.\d+)*)`)
	invariantWord = regexp.MustCompile(`^ invariants? (\d+)`)
)

// designWord is the word every reference starts with; it is spelled in two parts so that
// this file holds no reference of its own.
var designWord = "DES" + "IGN"

// scanRefs finds every reference to the design in text: the word DESIGN, optionally a
// comment marker and a line break (a reference wrapped in a comment), then '§' and a section
// number, and a range's second number ("§4–§6"). "DESIGN.md", a file that does not exist, and
// "§8 invariant 9" (for §8.9) are the wrong form; other uses of the word are no references.
func scanRefs(text string) []ref {
	var out []ref
	for off := 0; ; {
		i := strings.Index(text[off:], designWord)
		if i < 0 {
			return out
		}
		start := off + i
		pos := start + len(designWord)
		off = pos
		if start > 0 && isWordByte(text[start-1]) {
			continue
		}
		line := 1 + strings.Count(text[:start], "\n")
		var problem string
		if strings.HasPrefix(text[pos:], ".md") {
			problem = "there is no " + designWord + ".md: write " + designWord + " §<section> (" + designFile + ")"
			pos += len(".md")
		} else if pos < len(text) && isWordByte(text[pos]) {
			continue // DESIGNS, DESIGN_X: another word
		}
		pos = skipMarkers(text, pos)
		if !strings.HasPrefix(text[pos:], "§") {
			if problem != "" {
				out = append(out, ref{line: line, text: excerpt(text, start, pos), problem: problem})
			}
			continue
		}
		pos += len("§")
		n := sectionNumber.FindString(text[pos:])
		pos += len(n)
		r := ref{line: line, section: n, problem: problem}
		if n == "" {
			r.problem = "'§' without a section number"
		}
		if m := invariantWord.FindStringSubmatch(text[pos:]); m != nil && !strings.Contains(n, ".") {
			r.problem = fmt.Sprintf("write §%s.%s for an invariant of §%s", n, m[1], n)
			pos += len(m[0])
		}
		r.text = excerpt(text, start, pos)
		out = append(out, r)
		// More sections of the same reference: a range ("§4–§6", "§8.9-§8.11") or a list
		// ("§8.5, §8.9", "§8.1 and §8.5").
		for {
			m := moreSections.FindStringSubmatch(text[pos:])
			if m == nil {
				break
			}
			out = append(out, ref{line: line, section: m[1], text: excerpt(text, start, pos+len(m[0]))})
			pos += len(m[0])
		}
		off = pos
	}
}

// skipMarkers skips blanks and the comment markers a wrapped reference may continue after
// ("//", "#", "*" at the start of a line).
func skipMarkers(text string, pos int) int {
	for pos < len(text) {
		switch {
		case text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n' || text[pos] == '\r':
			pos++
		case strings.HasPrefix(text[pos:], "//"):
			pos += 2
		case text[pos] == '#' || text[pos] == '*':
			pos++
		default:
			return pos
		}
	}
	return pos
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// excerpt is text[start:end] on one line.
func excerpt(text string, start, end int) string {
	return strings.Join(strings.Fields(text[start:min(end, len(text))]), " ")
}

// designLink finds links to the design's headings: "design.md#anchor" anywhere, and "(#anchor)"
// inside the design itself.
var designLink = regexp.MustCompile(`design\.md#([A-Za-z0-9_\-]+)`)
var selfLink = regexp.MustCompile(`\]\(#([A-Za-z0-9_\-]+)\)`)

// trackedFiles lists the repository's files, relative to root: git's list when there is a
// repository, else every file outside .git.
func trackedFiles(t *testing.T) []string {
	t.Helper()
	if out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output(); err == nil && len(out) > 0 {
		var files []string
		for f := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
			files = append(files, filepath.FromSlash(f))
		}
		return files
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (e.Name() == ".git" || e.Name() == "bin") {
			return filepath.SkipDir
		}
		if e.Type().IsRegular() {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	require.NoError(t, err)
	return files
}

// textOf returns a file's text, or false for what is not text (binary, huge, gone).
func textOf(name string) (string, bool) {
	data, err := os.ReadFile(filepath.Join(root, name))
	if err != nil || len(data) > 4<<20 || bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data) {
		return "", false
	}
	return string(data), true
}

func loadDesign(t *testing.T) design {
	t.Helper()
	text, ok := textOf(designFile)
	require.True(t, ok, "read %s", designFile)
	d, err := parseDesign(text)
	require.NoError(t, err, "%s", designFile)
	return d
}

// TestDesignReferencesResolve: every "DESIGN §x[.y]" of every tracked file names a numbered
// heading of the design, in the one form the tree uses; every link into the design names one
// of its headings; and the design's own "§x" cross-references resolve.
func TestDesignReferencesResolve(t *testing.T) {
	d := loadDesign(t)
	self := filepath.FromSlash("docs/docs_test.go")
	var bad []string
	refs, citing := 0, 0
	for _, f := range trackedFiles(t) {
		if f == self {
			continue
		}
		text, ok := textOf(f)
		if !ok {
			continue
		}
		found := scanRefs(text)
		if len(found) > 0 {
			citing++
		}
		for _, r := range found {
			refs++
			switch {
			case r.problem != "":
				bad = append(bad, fmt.Sprintf("%s:%d: %q: %s", f, r.line, r.text, r.problem))
			case d.sections[r.section].number == "":
				bad = append(bad, fmt.Sprintf("%s:%d: %q: %s has no section %s", f, r.line, r.text, designFile, r.section))
			}
		}
		links := designLink.FindAllStringSubmatchIndex(text, -1)
		if filepath.ToSlash(f) == designFile {
			links = append(links, selfLink.FindAllStringSubmatchIndex(text, -1)...)
		}
		for _, m := range links {
			if anchor := text[m[2]:m[3]]; !d.anchors[anchor] {
				bad = append(bad, fmt.Sprintf("%s:%d: link #%s: no heading of %s has that anchor",
					f, 1+strings.Count(text[:m[0]], "\n"), anchor, designFile))
			}
		}
	}
	text, _ := textOf(designFile)
	for i, line := range strings.Split(text, "\n") {
		for _, m := range regexp.MustCompile(`§(\d+(?:\.\d+)*)`).FindAllStringSubmatch(line, -1) {
			if d.sections[m[1]].number == "" {
				bad = append(bad, fmt.Sprintf("%s:%d: §%s: no such section", designFile, i+1, m[1]))
			}
		}
	}
	require.Empty(t, bad, "references to the design that do not resolve:\n%s", strings.Join(bad, "\n"))
	require.Positive(t, refs, "no reference found at all: the scan is broken")
	t.Logf("%d references to the design in %d files, all resolved", refs, citing)
}

// TestDesignSections: the sections the tree has always cited keep their numbers — §1 to §11,
// and §8's eleven invariants as 8.1 to 8.11 — and numbers run in order without gaps.
func TestDesignSections(t *testing.T) {
	d := loadDesign(t)
	for i := 1; i <= 11; i++ {
		for _, n := range []string{fmt.Sprint(i), fmt.Sprintf("8.%d", i)} {
			_, ok := d.sections[n]
			require.True(t, ok, "%s has no heading numbered %s", designFile, n)
		}
	}
	// Each number follows the one before: its first child (7 → 7.1) or the next sibling at
	// some depth (7.2.1 → 7.3, 7.3 → 8).
	var prev []int
	for _, n := range d.order {
		var cur []int
		for p := range strings.SplitSeq(n, ".") {
			var v int
			_, err := fmt.Sscan(p, &v)
			require.NoError(t, err, n)
			cur = append(cur, v)
		}
		ok := slices.Equal(cur, append(slices.Clone(prev), 1))
		for depth := range prev {
			ok = ok || slices.Equal(cur, append(slices.Clone(prev[:depth]), prev[depth]+1))
		}
		require.True(t, ok, "section %s (%q) does not follow %v", n, d.sections[n].title, prev)
		prev = cur
	}
}

// TestReadmeLinksDesign: the README points readers at the design.
func TestReadmeLinksDesign(t *testing.T) {
	text, ok := textOf("README.md")
	require.True(t, ok)
	require.True(t, strings.Contains(text, "("+designFile+")"), "README.md has no link to %s", designFile)
}

// TestScanRefs: the scan finds what the tree writes, and only that.
func TestScanRefs(t *testing.T) {
	D := designWord
	cases := []struct {
		text string
		want []ref
	}{
		{"see " + D + " §8.8.", []ref{{line: 1, section: "8.8"}}},
		{"a\nb (" + D + " §5.3, opt-in)", []ref{{line: 2, section: "5.3"}}},
		{"// (" + D + "\n// §2): the layouts", []ref{{line: 1, section: "2"}}},
		{"# " + D + "\n# §7: the sweep", []ref{{line: 1, section: "7"}}},
		{D + " §4–§6", []ref{{line: 1, section: "4"}, {line: 1, section: "6"}}},
		{"(" + D + " §6, §8.9–§8.11)", []ref{{line: 1, section: "6"}, {line: 1, section: "8.9"}, {line: 1, section: "8.11"}}},
		{D + " §8.1 and §8.5, then §3", []ref{{line: 1, section: "8.1"}, {line: 1, section: "8.5"}}},
		{D + " §8.9-§8.11", []ref{{line: 1, section: "8.9"}, {line: 1, section: "8.11"}}},
		{D + " §9's defaults", []ref{{line: 1, section: "9"}}},
		{D + " §6 step 1", []ref{{line: 1, section: "6"}}},
		{"the " + D + "S of it, " + D + "_X §1, not" + D + " §2", nil},
		{"the design (" + D + ")", nil},
	}
	for _, c := range cases {
		got := scanRefs(c.text)
		for i := range got {
			got[i].text = ""
		}
		require.Equal(t, c.want, got, "%q", c.text)
	}
	for _, text := range []string{D + ".md §8 invariant 9", D + " §8 invariant 11", D + ".md's", D + " §"} {
		got := scanRefs(text)
		require.Len(t, got, 1, "%q", text)
		require.NotEmpty(t, got[0].problem, "%q", text)
	}
	require.Equal(t, "8.9", scanRefs(D + ".md §8.9")[0].section)
}

// TestParseDesign: numbered headings define sections, code blocks do not, repeats fail.
func TestParseDesign(t *testing.T) {
	d, err := parseDesign("# Title\n## 8. Safety invariants\n### 8.1 Exact bytes\n```\n# 9. not a heading\n```\n## 9 Configuration\n")
	require.NoError(t, err)
	require.Equal(t, []string{"8", "8.1", "9"}, d.order)
	require.Equal(t, "81-exact-bytes", d.sections["8.1"].anchor)
	require.True(t, d.anchors["title"])
	_, err = parseDesign("## 8. A\n## 8. B\n")
	require.ErrorContains(t, err, "section 8 defined again")
	_, err = parseDesign("## 8.1 A\n## 8.1: A\n")
	require.ErrorContains(t, err, "repeats anchor #81-a")
}

// TestDesignNamesExist: what the design names in code spans exists in the tree — every test
// it cites as guarding an invariant (`TestX`), every repository path (`pipeline/sweep/`), and
// every Go identifier it names with its package (`kvcm.OwnerOf`, `kvcm.StorageType.Rule`) —
// so that a rename or a removal shows up here, not in a reader's search.
func TestDesignNamesExist(t *testing.T) {
	text, ok := textOf(designFile)
	require.True(t, ok)
	files := trackedFiles(t)

	tests := map[string]bool{}
	sources := map[string][]string{} // package name → its non-test source texts
	funcTest := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	pkgLine := regexp.MustCompile(`(?m)^package (\w+)`)
	for _, f := range files {
		if filepath.Ext(f) != ".go" {
			continue
		}
		src, ok := textOf(f)
		if !ok {
			continue
		}
		if strings.HasSuffix(f, "_test.go") {
			for _, m := range funcTest.FindAllStringSubmatch(src, -1) {
				tests[m[1]] = true
			}
			continue
		}
		if m := pkgLine.FindStringSubmatch(src); m != nil {
			sources[m[1]] = append(sources[m[1]], src)
		}
	}

	var bad []string
	checked := 0
	spans := regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(text, -1)
	testName := regexp.MustCompile(`^Test[A-Z]\w*$`)
	repoPath := regexp.MustCompile(`^[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*/?$`)
	ident := regexp.MustCompile(`^([a-z][a-z0-9]*)\.([A-Z]\w*)(?:\.([A-Z]\w*))?$`)
	for _, m := range spans {
		span := m[1]
		switch {
		case testName.MatchString(span):
			checked++
			if !tests[span] {
				bad = append(bad, fmt.Sprintf("test %s: no such test function", span))
			}
		case strings.Contains(span, "/") && repoPath.MatchString(span):
			top, _, _ := strings.Cut(span, "/")
			if _, err := os.Stat(filepath.Join(root, top)); err != nil {
				continue // not a path of the repository (log/slog, mountpoint/root_dir/)
			}
			checked++
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(span))); err != nil {
				bad = append(bad, fmt.Sprintf("path %s: %v", span, err))
			}
		case ident.MatchString(span):
			p := ident.FindStringSubmatch(span)
			srcs, known := sources[p[1]]
			if !known {
				continue // not one of the project's packages
			}
			checked++
			if !declared(srcs, p[2], p[3]) {
				bad = append(bad, fmt.Sprintf("identifier %s: not declared in package %s", span, p[1]))
			}
		}
	}
	require.Empty(t, bad, "names in %s that the tree does not have:\n%s", designFile, strings.Join(bad, "\n"))
	require.Positive(t, checked, "no name found at all: the scan is broken")
	t.Logf("%d tests, paths and identifiers named by the design, all present", checked)
}

// declared reports whether one of srcs declares name (a func, type, var or const, also in a
// block), or, with method set, a method of type name.
func declared(srcs []string, name, method string) bool {
	q := regexp.QuoteMeta
	pattern := `(?m)^(?:func|type|var|const)\s+` + q(name) + `\b|^\t` + q(name) + `\b[^\n]*(?:=|\b[A-Z]\w*$)|^\t` + q(name) + `\s`
	if method != "" {
		pattern = `(?m)^func\s+\(\w+\s+\*?` + q(name) + `\)\s+` + q(method) + `\(`
	}
	re := regexp.MustCompile(pattern)
	return slices.ContainsFunc(srcs, re.MatchString)
}
