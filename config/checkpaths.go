package config

// The stack's paths: the data dir, each binding's store path, and the check
// that no two bindings share or nest a store, linear in the bindings.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func hasTilde(p string) bool {
	return p == "~" || strings.HasPrefix(p, "~/")
}

// checkDataDir sets s.DataDir and returns it with the symlinks of its
// existing part resolved.
func (p *parser) checkDataDir(s *Stack, r *rawStack) (string, bool) {
	const field = "dataDir"
	n, v := r.dataDirNode, r.dataDir
	if n == nil {
		v = DefaultDataDir
	}
	if p.dataDir != "" {
		n, v = nil, p.dataDir
	}
	switch {
	case v == "":
		p.addf(n, field, "must not be empty; leave it out for %s", DefaultDataDir)
		return "", false
	case hasTilde(v):
		p.addf(n, field, "~ is not expanded, got %q; write ${HOME}%s", v, v[1:])
		return "", false
	case strings.ContainsRune(v, 0):
		p.addf(n, field, "must not contain a NUL byte, got %q", v)
		return "", false
	case filepath.IsAbs(v):
		s.DataDir = filepath.Clean(v)
	default:
		s.DataDir = filepath.Join(s.Dir, v)
	}
	real, err := p.realPath(s.DataDir)
	if err != nil {
		p.addf(n, field, "cannot resolve %s: %v", s.DataDir, err)
		return "", false
	}
	if fi, err := os.Stat(real); err == nil && !fi.IsDir() {
		p.addf(n, field, "%s exists and is not a folder", s.DataDir)
		return "", false
	}
	return real, true
}

// checkPath sets rb's Path and returns it with the symlinks of its existing
// part resolved. realData is DataDir resolved the same way.
func (p *parser) checkPath(s *Stack, rb *rawBinding, realData string) (string, bool) {
	b := &rb.b
	field := bindingField(b.Name, "path")
	n, v, what := rb.pathNode, rb.path, "path"
	if n == nil {
		if !rb.typeOK || !rb.nameOK {
			return "", false // the default needs both; their problems are reported
		}
		n, v = rb.key, filepath.Join(string(b.Type), b.Name)
		what = "default path " + v
		rb.defaulted = append(rb.defaulted, "path")
	}
	switch {
	case v == "":
		p.addf(n, field, "must not be empty; leave it out for <dataDir>/%s/%s", b.Type, b.Name)
		return "", false
	case hasTilde(v):
		p.addf(n, field, "~ is not expanded, got %q; write ${HOME}%s", v, v[1:])
		return "", false
	case strings.ContainsRune(v, 0):
		// The kernel refuses such a name; without this check the path
		// passed wherever its folder did not exist yet and up failed.
		p.addf(n, field, "must not contain a NUL byte, got %q", v)
		return "", false
	case filepath.IsAbs(v):
		b.Path, b.AbsolutePathGiven = filepath.Clean(v), true
	default:
		c := filepath.Clean(v)
		if c == ".." || strings.HasPrefix(c, ".."+string(filepath.Separator)) {
			p.addf(n, field, "must stay inside dataDir, got %q; use an absolute path to put a store elsewhere", v)
			return "", false
		}
		b.Path = filepath.Join(s.DataDir, c)
	}
	if inside(b.Path, s.DataDir) {
		if b.Path == s.DataDir {
			p.addf(n, field, "must not be dataDir itself (%s); every binding needs its own folder", s.DataDir)
		} else {
			p.addf(n, field, "%s holds dataDir %s; a binding's folder must not contain dataDir", b.Path, s.DataDir)
		}
		return "", false
	}
	real, err := p.realPath(b.Path)
	if err != nil {
		p.addf(n, field, "cannot resolve %s: %v", b.Path, err)
		return "", false
	}
	if !b.AbsolutePathGiven && !inside(realData, real) {
		p.addf(n, field, "%s resolves through a symlink to %s, outside dataDir %s; use an absolute path to put a store elsewhere", what, real, realData)
		return "", false
	}
	if inside(real, realData) {
		p.addf(n, field, "%s resolves through a symlink to %s, which is or holds dataDir %s", what, real, realData)
		return "", false
	}
	if fi, err := os.Stat(real); err == nil && !fi.IsDir() {
		p.addf(n, field, "%s exists and is not a folder", b.Path)
		return "", false
	}
	return real, true
}

// maxOverlapReports bounds the overlap problems reported per binding: a
// stack file of thousands of bindings with one path would otherwise list
// every pair.
const maxOverlapReports = 10

// checkOverlaps refuses two bindings that share a folder or nest one inside
// the other, comparing paths as written and with symlinks resolved. The
// problem goes to the binding that comes later in the file, one per
// binding it overlaps (at most maxOverlapReports, then one that says more
// follow). It is linear in the number of bindings (times a path's depth):
// each folder, and each folder above it, is looked up in an index of the
// bindings' folders, instead of comparing every pair.
func (p *parser) checkOverlaps(bindings []*rawBinding, real map[*rawBinding]string) {
	written := make([]string, len(bindings))
	resolved := make([]string, len(bindings))
	for i, b := range bindings {
		if r, ok := real[b]; ok {
			written[i], resolved[i] = b.b.Path, r
		}
	}
	wi, ri := newFolderIndex(written), newFolderIndex(resolved)
	for j, b := range bindings {
		if written[j] == "" {
			continue
		}
		// The earliest bindings that overlap j, by either path; the
		// written relation wins where both hold, as it reads better.
		cand := append(wi.earlier(j, maxOverlapReports+1), ri.earlier(j, maxOverlapReports+1)...)
		slices.Sort(cand)
		cand = slices.Compact(cand)
		n := b.pathNode
		if n == nil {
			n = b.key
		}
		field := bindingField(b.b.Name, "path")
		for k, i := range cand {
			if k == maxOverlapReports {
				p.addf(n, field, "overlaps more bindings above; only the first %d are listed", maxOverlapReports)
				break
			}
			a := bindings[i]
			other := bindingField(a.b.Name, "")
			pa, pb, ra, rb := written[i], written[j], resolved[i], resolved[j]
			switch {
			case pa == pb:
				p.addf(n, field, "shares folder %s with %s; every binding needs its own folder", pb, other)
			case inside(pa, pb):
				p.addf(n, field, "folder %s is inside %s's folder %s; bindings may not nest", pb, other, pa)
			case inside(pb, pa):
				p.addf(n, field, "folder %s holds %s's folder %s; bindings may not nest", pb, other, pa)
			case ra == rb:
				p.addf(n, field, "folder %s is %s's folder %s once symlinks are resolved (both are %s); every binding needs its own folder", pb, other, pa, rb)
			case inside(ra, rb):
				p.addf(n, field, "folder %s is inside %s's folder %s once symlinks are resolved (%s is inside %s); bindings may not nest", pb, other, pa, rb, ra)
			case inside(rb, ra):
				p.addf(n, field, "folder %s holds %s's folder %s once symlinks are resolved (%s holds %s); bindings may not nest", pb, other, pa, rb, ra)
			}
		}
	}
}

// folderIndex finds the bindings whose folders overlap one binding's:
// the same folder, one above it or one below it.
type folderIndex struct {
	paths []string         // by binding, "" for none
	at    map[string][]int // folder -> the bindings there, ascending
	below map[string][]int // folder -> the bindings strictly below it, ascending
}

func newFolderIndex(paths []string) *folderIndex {
	x := &folderIndex{paths: paths, at: make(map[string][]int, len(paths)), below: make(map[string][]int)}
	for i, p := range paths {
		if p == "" {
			continue
		}
		x.at[p] = append(x.at[p], i)
		for d, ok := parentDir(p); ok; d, ok = parentDir(d) {
			x.below[d] = append(x.below[d], i)
		}
	}
	return x
}

// earlier returns bindings before j (in file order) whose folder is j's,
// holds it or lies inside it: the first max of each kind and folder, so
// that the first max of them all are among them. Unsorted, may repeat.
func (x *folderIndex) earlier(j, max int) []int {
	p := x.paths[j]
	if p == "" {
		return nil
	}
	var out []int
	take := func(list []int) {
		for k, i := range list {
			if i >= j || k == max { // ascending: nothing later qualifies
				return
			}
			out = append(out, i)
		}
	}
	take(x.at[p])
	take(x.below[p])
	for d, ok := parentDir(p); ok; d, ok = parentDir(d) {
		take(x.at[d])
	}
	return out
}

// parentDir is the folder holding the absolute, clean path p; false for
// the root.
func parentDir(p string) (string, bool) {
	i := strings.LastIndexByte(p, filepath.Separator)
	switch {
	case i < 0 || p == string(filepath.Separator):
		return "", false
	case i == 0:
		return p[:1], true
	}
	return p[:i], true
}

// inside reports whether child is parent or lies below it. Both are
// absolute and clean.
func inside(parent, child string) bool {
	if child == parent {
		return true
	}
	if parent == string(filepath.Separator) {
		return strings.HasPrefix(child, parent)
	}
	return strings.HasPrefix(child, parent) && child[len(parent)] == filepath.Separator
}

// realPath resolves the symlinks in the longest existing prefix of the
// absolute, clean path path and appends the rest unchanged. A dangling
// symlink on the way is an error: where it would lead cannot be checked.
// The answers are kept for the parse, so that the folders above thousands
// of bindings' paths are resolved once, not once per binding.
func (p *parser) realPath(path string) (string, error) {
	if r, ok := p.real[path]; ok {
		return r.path, r.err
	}
	r, err := p.resolve(path)
	if p.real == nil {
		p.real = make(map[string]resolved)
	}
	p.real[path] = resolved{r, err}
	return r, err
}

type resolved struct {
	path string
	err  error
}

func (p *parser) resolve(path string) (string, error) {
	r, err := filepath.EvalSymlinks(path)
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return "", fmt.Errorf("%s is a symlink to a missing target", path)
	}
	parent := filepath.Dir(path)
	if parent == path {
		return path, nil
	}
	rp, err := p.realPath(parent)
	if err != nil {
		return "", err
	}
	return filepath.Join(rp, filepath.Base(path)), nil
}
