package libgoroce

import (
	"regexp"
	"strings"
	"testing"
)

// TestOwnAllocator keeps the library's objects off the program's heap: a
// registered buffer's pages are swapped (src/swap.c), and an object of the
// library sharing a page with one (rping's buffers and a CM ID's record did)
// would have its system calls fail meanwhile. Every allocation goes through
// src/alloc.c.
func TestOwnAllocator(t *testing.T) {
	libc := regexp.MustCompile(`(^|[^\w.>])(malloc|calloc|realloc|free|strdup|strndup|posix_memalign|aligned_alloc)\(`)
	for _, name := range sourceNames() {
		if name == "alloc.c" || !strings.HasSuffix(name, ".c") && !strings.HasSuffix(name, ".h") {
			continue
		}
		b, err := sources.ReadFile("src/" + name)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			code := strings.TrimSpace(line)
			if strings.HasPrefix(code, "*") || strings.HasPrefix(code, "/*") || strings.HasPrefix(code, "//") {
				continue
			}
			if libc.MatchString(code) {
				t.Errorf("src/%s:%d: libc allocation (use gr_malloc, gr_calloc, gr_realloc, gr_free): %s", name, i+1, code)
			}
		}
	}
}
