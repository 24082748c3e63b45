//go:build !goroce_faults

package verbs_test

import (
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
)

// awaitFaultTapEmpty reports that e holds no packet back: without the
// goroce_faults tag no device has a fault tap.
func awaitFaultTapEmpty(*testing.T, *rdmatest.End) bool { return false }
