// Package libgoroce holds the C sources of libgoroce.so, the LD_PRELOAD
// library that exposes goroce devices through libibverbs' and librdmacm's ABI, and builds
// them with the system's C compiler, so that a `go install`ed goroce-exec
// needs nothing else than gcc and Debian's libibverbs-dev and librdmacm-dev
// headers.
package libgoroce

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
)

//go:embed src
var sources embed.FS

// CFlags and LDFlags are those of libgoroce/Makefile.
var (
	CFlags  = []string{"-O2", "-g", "-std=gnu11", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"}
	LDFlags = []string{"-shared", "-Wl,--version-script=libgoroce.map", "-Wl,-z,defs"}
	LDLibs  = []string{"-lpthread", "-ldl"}
)

// Hash identifies the sources: the library built from them is named after it.
func Hash() string {
	h := sha256.New()
	names := sourceNames()
	for _, n := range names {
		b, _ := sources.ReadFile("src/" + n)
		fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func sourceNames() []string {
	ents, _ := fs.ReadDir(sources, "src")
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// Build returns the path of libgoroce.so in cacheDir, compiling it first if
// no library of these sources is there. cc is the compiler ("" means $CC,
// else gcc).
func Build(cacheDir, cc string) (string, error) {
	out := filepath.Join(cacheDir, "libgoroce-"+Hash()+".so")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if cc == "" {
		cc = os.Getenv("CC")
	}
	if cc == "" {
		cc = "gcc"
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(cacheDir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	var cfiles []string
	for _, n := range sourceNames() {
		b, _ := sources.ReadFile("src/" + n)
		if err := os.WriteFile(filepath.Join(tmp, n), b, 0o644); err != nil {
			return "", err
		}
		if filepath.Ext(n) == ".c" {
			cfiles = append(cfiles, n)
		}
	}
	args := append(append(append(append([]string{}, CFlags...), LDFlags...), "-o", "libgoroce.so"), cfiles...)
	args = append(args, LDLibs...)
	cmd := exec.Command(cc, args...)
	cmd.Dir = tmp
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building libgoroce.so (needs gcc, libibverbs-dev and librdmacm-dev: apt-get install gcc libibverbs-dev librdmacm-dev): %v\n%s", err, msg)
	}
	// Rename into place: a concurrent build of the same sources wins or
	// loses the race harmlessly.
	if err := os.Rename(filepath.Join(tmp, "libgoroce.so"), out); err != nil {
		return "", err
	}
	return out, nil
}

// DefaultCacheDir is where goroce-exec keeps built libraries:
// $XDG_CACHE_HOME/goroce, else ~/.cache/goroce, else a directory in /tmp.
func DefaultCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "goroce")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("goroce-cache-%d", os.Getuid()))
}
