package ddblock_test

import (
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The documentation a user reads links its pages to each other. Every
// relative link must reach a file of the repository, and every #anchor a
// heading of its page, as GitHub names headings.

// docPages are the pages checked, from the repository's root.
func docPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"README.md", "CHANGELOG.md"}
	more, err := filepath.Glob("doc/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(more) == 0 {
		t.Fatal("no doc/*.md found: the test must run from the repository's root")
	}
	return append(pages, more...)
}

// TestDocLinks: in README.md, CHANGELOG.md and doc/*.md, every relative
// Markdown link names a file or directory that exists, and every anchor,
// on the same page or another Markdown page, names one of that page's
// headings.
func TestDocLinks(t *testing.T) {
	anchors := map[string]map[string]bool{} // page (slash path) -> its anchors
	anchorsOf := func(page string) (map[string]bool, error) {
		if a, ok := anchors[page]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.FromSlash(page))
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(b))
		anchors[page] = a
		return a, nil
	}

	for _, page := range docPages(t) {
		page = filepath.ToSlash(page)
		b, err := os.ReadFile(filepath.FromSlash(page))
		if err != nil {
			t.Errorf("%s: %v", page, err)
			continue
		}
		for _, l := range markdownLinks(string(b)) {
			where := page + ":" + strconv.Itoa(l.line)
			target := l.target
			if target == "" {
				t.Errorf("%s: link %q: empty target", where, l.target)
				continue
			}
			if isExternal(target) {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			if f, err := url.PathUnescape(file); err == nil {
				file = f
			}
			if f, err := url.PathUnescape(frag); err == nil {
				frag = f
			}
			dest := page // a bare #anchor is on this page
			if file != "" {
				if strings.HasPrefix(file, "/") {
					dest = path.Clean(strings.TrimPrefix(file, "/"))
				} else {
					dest = path.Join(path.Dir(page), file)
				}
				if _, err := os.Stat(filepath.FromSlash(dest)); err != nil {
					t.Errorf("%s: link %q: %s does not exist", where, l.target, dest)
					continue
				}
			}
			if !strings.Contains(target, "#") {
				continue
			}
			if !strings.HasSuffix(strings.ToLower(dest), ".md") {
				continue // anchors of source files (#L10) are GitHub's, not headings
			}
			if frag == "" {
				t.Errorf("%s: link %q: empty anchor", where, l.target)
				continue
			}
			a, err := anchorsOf(dest)
			if err != nil {
				t.Errorf("%s: link %q: %v", where, l.target, err)
				continue
			}
			if !a[frag] {
				t.Errorf("%s: link %q: %s has no heading with the anchor #%s%s", where, l.target, dest, frag, nearest(a, frag))
			}
		}
	}
}

// TestDocLinksParsing pins the parts of the link test that could make it
// pass on a broken page: the anchors GitHub gives headings, and the links
// found in a page.
func TestDocLinksParsing(t *testing.T) {
	page := strings.Join([]string{
		"# The `ddblock` command",
		"## At most N at once: `--slots`",
		"### `DynamoDBLockClient(...)` parameters → `ddblock.New` options",
		"## What a python_dynamodb_lock client sees",
		"## Tested",
		"## Tested",
		"## Guarded writes, fencing tokens, or a check of Err ##",
		"## [Linked](x.md) *heading*",
		"```sh",
		"# not a heading: see [code](nowhere.md)",
		"```",
		"#not a heading either",
		"See [a](b.md#c), `[not](a-link.md)`, ![img](i.png) and [e](https://example.com/x.md).",
		"[ref]: doc/ref.md",
	}, "\n")
	got := headingAnchors(page)
	for _, want := range []string{
		"the-ddblock-command",
		"at-most-n-at-once---slots",
		"dynamodblockclient-parameters--ddblocknew-options",
		"what-a-python_dynamodb_lock-client-sees",
		"tested", "tested-1",
		"guarded-writes-fencing-tokens-or-a-check-of-err",
		"linked-heading",
	} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if len(got) != 8 {
		t.Errorf("anchors %v; want 8", got)
	}
	var targets []string
	for _, l := range markdownLinks(page) {
		targets = append(targets, l.target+"@"+strconv.Itoa(l.line))
	}
	want := "x.md@8 b.md#c@13 i.png@13 https://example.com/x.md@13 doc/ref.md@14"
	if strings.Join(targets, " ") != want {
		t.Errorf("links %q; want %q", strings.Join(targets, " "), want)
	}
}

// mdLink is one link of a page.
type mdLink struct {
	line   int    // 1-based
	target string // the destination as written, without a title
}

// fence opens or closes a fenced code block.
var fence = regexp.MustCompile("^ {0,3}(```+|~~~+)")

// refDef is a link reference definition: [label]: target.
var refDef = regexp.MustCompile(`^ {0,3}\[[^\]^][^\]]*\]:\s*<?([^\s>]*)>?`)

// markdownLinks returns the inline links, images and reference
// definitions of a page, outside fenced code blocks and code spans.
func markdownLinks(text string) []mdLink {
	var links []mdLink
	forLines(text, func(n int, line string) {
		if m := refDef.FindStringSubmatch(line); m != nil {
			links = append(links, mdLink{line: n, target: m[1]})
			return
		}
		line = stripCodeSpans(line)
		for i := 0; ; {
			j := strings.Index(line[i:], "](")
			if j < 0 {
				break
			}
			start := i + j + 2
			target, end := linkDestination(line, start)
			links = append(links, mdLink{line: n, target: target})
			i = end
		}
	})
	return links
}

// forLines calls fn for each line of text outside fenced code blocks.
func forLines(text string, fn func(n int, line string)) {
	var open string // the fence that opened the current block
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, "\r")
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case open == "":
				open = m[1]
				continue
			case m[1][0] == open[0] && len(m[1]) >= len(open) && strings.TrimSpace(line[len(m[0]):]) == "":
				open = ""
				continue
			}
		}
		if open == "" {
			fn(i+1, line)
		}
	}
}

// linkDestination reads a link destination at line[start:], after "](":
// <...>, or up to a space or the ")" that balances. It returns it and
// the index after the link's closing ")".
func linkDestination(line string, start int) (string, int) {
	i := start
	for i < len(line) && line[i] == ' ' {
		i++
	}
	var dest string
	if i < len(line) && line[i] == '<' {
		end := strings.IndexByte(line[i:], '>')
		if end < 0 {
			return line[i:], len(line)
		}
		dest, i = line[i+1:i+end], i+end+1
	} else {
		depth, j := 0, i
	loop:
		for ; j < len(line); j++ {
			switch line[j] {
			case '(':
				depth++
			case ')':
				if depth == 0 {
					break loop
				}
				depth--
			case ' ', '\t':
				break loop
			}
		}
		dest, i = line[i:j], j
	}
	// Skip a title and the closing parenthesis.
	if end := strings.IndexByte(line[i:], ')'); end >= 0 {
		i += end + 1
	} else {
		i = len(line)
	}
	return dest, i
}

// stripCodeSpans blanks the code spans of a line, backticks included.
func stripCodeSpans(line string) string {
	b := []byte(line)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(b) && b[i+n] == '`' {
			n++
		}
		// Find a closing run of exactly n backticks.
		closeAt := -1
		for j := i + n; j < len(b); {
			if b[j] != '`' {
				j++
				continue
			}
			m := 0
			for j+m < len(b) && b[j+m] == '`' {
				m++
			}
			if m == n {
				closeAt = j
				break
			}
			j += m
		}
		if closeAt < 0 {
			i += n
			continue
		}
		for k := i; k < closeAt+n; k++ {
			b[k] = ' '
		}
		i = closeAt + n
	}
	return string(b)
}

// atxHeading matches an ATX heading and its text.
var atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)

// inlineLink matches a link or image, whose text stays in a heading.
var inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// htmlTag matches an HTML tag, dropped from a heading.
var htmlTag = regexp.MustCompile(`<[^>]+>`)

// explicitAnchor matches <a name="…"> or id="…", also link targets.
var explicitAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)

// headingAnchors returns the anchors GitHub gives a page's headings:
// the heading's text, lowercased, without punctuation other than
// hyphens and underscores, its spaces made hyphens; the second heading
// with the same anchor gets -1, the third -2, and so on.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	forLines(text, func(_ int, line string) {
		for _, m := range explicitAnchor.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			return
		}
		slug := slugify(headingText(m[1]))
		if anchors[slug] {
			for n := 1; ; n++ {
				if s := slug + "-" + strconv.Itoa(n); !anchors[s] {
					slug = s
					break
				}
			}
		}
		anchors[slug] = true
	})
	return anchors
}

// headingText is a heading as GitHub renders it to text: links and
// images by their text, without code-span backticks and HTML tags.
func headingText(s string) string {
	s = inlineLink.ReplaceAllString(s, "$1")
	s = htmlTag.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, "`", "")
}

// slugify makes GitHub's anchor of a heading's text.
func slugify(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(s)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// isExternal says whether a link leaves the repository: a URL with a
// scheme (https:, mailto:) or a protocol-relative one.
func isExternal(target string) bool {
	if strings.HasPrefix(target, "//") {
		return true
	}
	u, err := url.Parse(target)
	return err == nil && u.Scheme != ""
}

// nearest suggests the page's anchors that share the missing anchor's
// first word, for the message.
func nearest(anchors map[string]bool, frag string) string {
	first, _, _ := strings.Cut(frag, "-")
	var close []string
	for a := range anchors {
		if first != "" && strings.HasPrefix(a, first) {
			close = append(close, "#"+a)
		}
	}
	if len(close) == 0 || len(close) > 5 {
		return ""
	}
	sort.Strings(close)
	return " (it has " + strings.Join(close, ", ") + ")"
}
