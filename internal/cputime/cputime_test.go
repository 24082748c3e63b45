package cputime

import "testing"

// TestProcessAdvances burns CPU and expects the process's CPU time to grow.
func TestProcessAdvances(t *testing.T) {
	before := Process()
	if before <= 0 {
		t.Fatalf("Process() = %v before any work, want > 0", before)
	}
	x := uint64(1)
	for after := Process(); after <= before; after = Process() {
		for range 1 << 20 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	if x == 0 {
		t.Log(x) // keep the loop
	}
}
