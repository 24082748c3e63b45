package verbs

import (
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// The few helpers of the white-box tests (files *_internal_test.go, in
// package verbs). Every other test is a black-box test in package
// verbs_test built on internal/rdmatest, which these cannot import: it
// imports verbs.

// openDevice opens a device on testkit's address number host, closed at
// the end of the test.
func openDevice(t testing.TB, host int) *Device {
	t.Helper()
	d, err := Open(DeviceConfig{Addr: testkit.Addr(host)})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func mustPD(t testing.TB, d *Device) *PD {
	t.Helper()
	pd, err := d.AllocPD()
	testkit.WantErr(t, err)
	return pd
}

func mustMR(t testing.TB, pd *PD, n int, access AccessFlags) *MR {
	t.Helper()
	mr, err := pd.RegMR(make([]byte, n), access)
	testkit.WantErr(t, err)
	return mr
}

// wantErr checks that err is an *Error wrapping sentinel that names field
// (if field is not empty); a nil sentinel expects success.
func wantErr(t testing.TB, err, sentinel error, field string) {
	t.Helper()
	testkit.WantFieldErr(t, err, sentinel, field, func(e *Error) string { return e.Field }, "verbs: ")
}
