// Package examples holds the test that keeps the README's first program
// compiling; the programs themselves are in the subdirectories.
package examples

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// imports maps the package names the README's Go blocks use to their
// import paths.
var imports = map[string]string{
	"binary":  "encoding/binary",
	"cm":      "github.com/goroce/goroce/cm",
	"context": "context",
	"errors":  "errors",
	"fmt":     "fmt",
	"io":      "io",
	"log":     "log",
	"netip":   "net/netip",
	"os":      "os",
	"rsocket": "github.com/goroce/goroce/rsocket",
	"time":    "time",
	"verbs":   "github.com/goroce/goroce/verbs",
}

// goBlocks returns the bodies of the ```go fenced blocks of a Markdown
// text, in order.
func goBlocks(md string) []string {
	var blocks []string
	var cur []string
	in := false
	for line := range strings.Lines(md) {
		trimmed := strings.TrimSpace(line)
		switch {
		case !in && trimmed == "```go":
			in, cur = true, nil
		case in && trimmed == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, ""))
		case in:
			cur = append(cur, line)
		}
	}
	return blocks
}

// program wraps each block in a function of its own, with the imports the
// blocks use, as one main package.
func program(blocks []string) string {
	used := map[string]bool{}
	ident := regexp.MustCompile(`\b([a-z]+)\.[A-Z]`)
	for _, b := range blocks {
		for _, m := range ident.FindAllStringSubmatch(b, -1) {
			if _, ok := imports[m[1]]; ok {
				used[m[1]] = true
			}
		}
	}
	var paths []string
	for name := range used {
		paths = append(paths, imports[name])
	}
	sort.Strings(paths)
	var b strings.Builder
	b.WriteString("package main\n\nimport (\n")
	for _, p := range paths {
		fmt.Fprintf(&b, "\t%q\n", p)
	}
	b.WriteString(")\n\nfunc main() {}\n")
	for i, block := range blocks {
		fmt.Fprintf(&b, "\n// README block %d\nfunc block%d() {\n%s}\n", i+1, i+1, block)
	}
	return b.String()
}

// TestReadmeCompiles builds README.md's Go blocks (the first program's
// server and client) against this repository, so that the README can
// never show a program that does not compile. Each block is the body of a
// function: it must declare what it uses and use what it declares.
func TestReadmeCompiles(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(md))
	if len(blocks) < 2 {
		t.Fatalf("README.md has %d Go blocks, want the first program's server and client", len(blocks))
	}
	src := program(blocks)

	dir := t.TempDir()
	gomod := fmt.Sprintf("module readmecheck\n\ngo 1.26.0\n\nrequire github.com/goroce/goroce v0.0.0\n\nreplace github.com/goroce/goroce => %s\n", root)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": []byte(src)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// go test puts its own GOROOT/bin first in the PATH of the tests.
	cmd := exec.Command("go", "build", "-o", os.DevNull, ".")
	cmd.Dir = dir
	// Offline: the module's requirements are in the module cache, as
	// building this repository put them there.
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		var numbered strings.Builder
		for i, line := range strings.Split(src, "\n") {
			fmt.Fprintf(&numbered, "%4d  %s\n", i+1, line)
		}
		t.Fatalf("README.md's Go blocks do not compile: %v\n%s\nthe program:\n%s", err, out, numbered.String())
	}
}

// TestGoBlocks checks the extraction itself.
func TestGoBlocks(t *testing.T) {
	md := "text\n```go\na := 1\n_ = a\n```\n```sh\nls\n```\n  ```go\nb()\n  ```\n"
	got := goBlocks(md)
	if len(got) != 2 || got[0] != "a := 1\n_ = a\n" || got[1] != "b()\n" {
		t.Fatalf("goBlocks = %q", got)
	}
	p := program([]string{"x := verbs.ErrBusy\n_ = x\n", "fmt.Println(cm.MaxPrivateData)\n"})
	for _, want := range []string{`"fmt"`, `"github.com/goroce/goroce/cm"`, `"github.com/goroce/goroce/verbs"`, "func block1() {\nx := verbs.ErrBusy", "func block2() {"} {
		if !strings.Contains(p, want) {
			t.Errorf("program lacks %q:\n%s", want, p)
		}
	}
}
