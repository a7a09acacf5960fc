package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
var root = filepath.Join("..", "..")

// pages are the Markdown files whose links are checked, relative to root.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md", filepath.Join("adapters", "README.md")}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rel)
	}
	return out
}

var (
	// link is a Markdown link or image: [text](target) or ![alt](target).
	link = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// fence opens or closes a code block, whose text holds no links.
	fence = regexp.MustCompile("^\\s*```")
	// heading is an ATX heading.
	heading = regexp.MustCompile(`^#{1,6}\s+(.*)$`)
)

// slug is GitHub's anchor of a heading: lower case, punctuation dropped
// but hyphens and underscores, spaces to hyphens.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// scan returns a Markdown file's links (outside code blocks) and the
// anchors of its headings.
func scan(t *testing.T, path string) (links []string, anchors map[string]bool) {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	anchors = map[string]bool{}
	inCode := false
	for _, line := range strings.Split(string(text), "\n") {
		if fence.MatchString(line) {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			anchors[slug(m[1])] = true
		}
		for _, m := range link.FindAllStringSubmatch(line, -1) {
			links = append(links, m[1])
		}
	}
	return links, anchors
}

// TestLinksResolve: every relative link names a file or directory of the
// repository, and its #fragment a heading of that file.
func TestLinksResolve(t *testing.T) {
	t.Parallel()
	for _, page := range pages(t) {
		links, _ := scan(t, filepath.Join(root, page))
		for _, l := range links {
			if strings.Contains(l, "://") || strings.HasPrefix(l, "mailto:") {
				continue
			}
			target, fragment, _ := strings.Cut(l, "#")
			path := filepath.Join(root, page) // a bare #fragment is in the page itself
			if target != "" {
				path = filepath.Join(root, filepath.Dir(page), target)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Errorf("%s: link %q: %v", page, l, err)
				continue
			}
			if fragment == "" || fi.IsDir() || !strings.HasSuffix(path, ".md") {
				continue
			}
			if _, anchors := scan(t, path); !anchors[fragment] {
				t.Errorf("%s: link %q: %s has no heading #%s", page, l, target, fragment)
			}
		}
	}
}

// TestEveryDocReachedFromREADME: each page of docs/ is linked from the
// README.
func TestEveryDocReachedFromREADME(t *testing.T) {
	t.Parallel()
	links, _ := scan(t, filepath.Join(root, "README.md"))
	linked := map[string]bool{}
	for _, l := range links {
		target, _, _ := strings.Cut(l, "#")
		linked[filepath.Clean(target)] = true
	}
	for _, page := range pages(t) {
		if !strings.HasPrefix(page, "docs"+string(filepath.Separator)) {
			continue
		}
		if !linked[page] {
			t.Errorf("README.md has no link to %s", page)
		}
	}
}
