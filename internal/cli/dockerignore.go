package cli

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// A build context's .dockerignore leaves files out of what the CLI sends, as docker build does: one
// pattern a line (path.Match syntax, "**" for any number of directories, a leading "/" ignored), "#"
// comments, "!" re-including what an earlier pattern left out. The last pattern that matches a path,
// or a directory above it, decides. The Dockerfile is sent whatever the patterns say.

// ignoreRule is one .dockerignore line.
type ignoreRule struct {
	parts   []string // the pattern's segments
	include bool     // a "!" line
}

// contextFilter says which paths of a build context stay out.
type contextFilter struct {
	rules    []ignoreRule
	includes bool   // some rule re-includes: an ignored directory is still walked
	keep     string // the Dockerfile's path, always sent
}

// maxDockerignore bounds a .dockerignore.
const maxDockerignore = 1 << 20

// readDockerignore reads dir/.dockerignore (none: nothing is left out).
func readDockerignore(dir, dockerfile string) (*contextFilter, error) {
	f := &contextFilter{keep: dockerfile}
	file, err := os.Open(filepath.Join(dir, ".dockerignore"))
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, err
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 64<<10), maxDockerignore)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{}
		if rest, ok := strings.CutPrefix(line, "!"); ok {
			r.include, line = true, strings.TrimSpace(rest)
			f.includes = true
		}
		line = strings.TrimPrefix(path.Clean("/"+filepath.ToSlash(line)), "/")
		if line == "" {
			continue
		}
		r.parts = strings.Split(line, "/")
		for _, p := range r.parts {
			if _, err := path.Match(p, ""); err != nil {
				return nil, fmt.Errorf(".dockerignore line %d: %q: %v", n, line, err)
			}
		}
		f.rules = append(f.rules, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf(".dockerignore: %w", err)
	}
	return f, nil
}

// ignored reports whether the context path rel (slash-separated, relative) stays out.
func (f *contextFilter) ignored(rel string) bool {
	if rel == f.keep || len(f.rules) == 0 {
		return false
	}
	segs := strings.Split(rel, "/")
	out := false
	for _, r := range f.rules {
		// The path itself or a directory above it.
		for n := len(segs); n >= 1; n-- {
			if matchParts(r.parts, segs[:n]) {
				out = !r.include
				break
			}
		}
	}
	return out
}

// matchParts matches path segments against pattern segments, "**" standing for any number of them.
func matchParts(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(segs); i++ {
				if matchParts(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], segs[0]); !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}
