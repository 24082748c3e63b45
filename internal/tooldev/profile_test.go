package tooldev

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStartCPUProfile: the profile is written and closed by stop; a
// second profile while one runs, and a path that cannot be created, fail.
func TestStartCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	stop, err := StartCPUProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := StartCPUProfile(filepath.Join(t.TempDir(), "second.prof")); err == nil {
		t.Error("a second profile started while one runs")
	}
	stop()
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("profile file: %v, %v", fi, err)
	}
	if _, err := StartCPUProfile(filepath.Join(t.TempDir(), "no", "such", "dir", "p")); err == nil {
		t.Error("a profile into a missing directory started")
	}
}
