//go:build !(linux && cgo && goroce_ibverbs)

package pingpong

import (
	"context"
	"testing"
)

// TestHardwareWithoutBackend: --hw in a build without the hardware
// backend fails at once, naming the build tag it needs.
func TestHardwareWithoutBackend(t *testing.T) {
	o := runProgram(context.Background(), &program{}, []string{"--hw", "-d", "rxe0", "--bind", serverAddr})
	oneLineError(t, "--hw", o, "couldn't open device rxe0")
	oneLineError(t, "--hw", o, "goroce_ibverbs")
}
