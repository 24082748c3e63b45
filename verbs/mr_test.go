package verbs_test

import (
	"math"
	"testing"
	"unsafe"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

// Ports rdma-core's tests/test_mr.py: registration with every flag
// combination, bad flags, rereg of address, access and PD, double dereg; plus
// the key table's guarantees.

func TestRegMRAllAccessCombinations(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	buf := make([]byte, 64)
	flags := []verbs.AccessFlags{
		verbs.AccessLocalWrite, verbs.AccessRemoteWrite, verbs.AccessRemoteRead, verbs.AccessRemoteAtomic,
		verbs.AccessMWBind, verbs.AccessZeroBased, verbs.AccessOnDemand, verbs.AccessHugeTLB,
		verbs.AccessFlushGlobal, verbs.AccessFlushPersistent, verbs.AccessRelaxedOrdering,
	}
	for combo := range 1 << len(flags) {
		var a verbs.AccessFlags
		for i, f := range flags {
			if combo&(1<<i) != 0 {
				a |= f
			}
		}
		var want error
		switch {
		case a&verbs.AccessOnDemand != 0:
			want = verbs.ErrNotSupported
		case a&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && a&verbs.AccessLocalWrite == 0:
			want = verbs.ErrInvalidArgument
		}
		mr, err := pd.RegMR(buf, a)
		if want != nil {
			rdmatest.WantError(t, err, want, "access")
			continue
		}
		if err != nil {
			t.Fatalf("RegMR(%v): %v", a, err)
		}
		if mr.Access() != a {
			t.Fatalf("Access() = %v, want %v", mr.Access(), a)
		}
		wantIOVA := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
		if a&verbs.AccessZeroBased != 0 {
			wantIOVA = 0
		}
		if mr.IOVA() != wantIOVA {
			t.Fatalf("%v: IOVA %#x, want %#x", a, mr.IOVA(), wantIOVA)
		}
		if err := mr.Dereg(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRegMRBadFlows(t *testing.T) {
	d := rdmatest.OpenDevice(t, verbs.DeviceConfig{Limits: &verbs.DeviceAttr{MaxMRSize: 100}})
	pd := rdmatest.PD(t, d)
	tests := []struct {
		name  string
		reg   func() (*verbs.MR, error)
		want  error
		field string
	}{
		{"empty", func() (*verbs.MR, error) { return pd.RegMR(nil, verbs.AccessLocalWrite) }, verbs.ErrInvalidArgument, "length"},
		{"zero length", func() (*verbs.MR, error) { return pd.RegMR(make([]byte, 0, 8), 0) }, verbs.ErrInvalidArgument, "length"},
		{"over max_mr_size", func() (*verbs.MR, error) { return pd.RegMR(make([]byte, 101), 0) }, verbs.ErrInvalidArgument, "length"},
		{"max_mr_size", func() (*verbs.MR, error) { return pd.RegMR(make([]byte, 100), 0) }, nil, ""},
		{"remote write alone", func() (*verbs.MR, error) { return pd.RegMR(make([]byte, 8), verbs.AccessRemoteWrite) }, verbs.ErrInvalidArgument, "access"},
		{"remote atomic alone", func() (*verbs.MR, error) { return pd.RegMR(make([]byte, 8), verbs.AccessRemoteAtomic) }, verbs.ErrInvalidArgument, "access"},
		{"unknown bit", func() (*verbs.MR, error) { return pd.RegMR(make([]byte, 8), 1<<12) }, verbs.ErrInvalidArgument, "access"},
		{"on demand", func() (*verbs.MR, error) {
			return pd.RegMR(make([]byte, 8), verbs.AccessOnDemand|verbs.AccessLocalWrite)
		}, verbs.ErrNotSupported, "access"},
		{"iova wraps", func() (*verbs.MR, error) { return pd.RegMRIOVA(make([]byte, 16), math.MaxUint64-14, 0) }, verbs.ErrInvalidArgument, "iova"},
		{"iova at the top", func() (*verbs.MR, error) { return pd.RegMRIOVA(make([]byte, 16), math.MaxUint64-15, 0) }, nil, ""},
		{"zero-based with iova", func() (*verbs.MR, error) { return pd.RegMRIOVA(make([]byte, 16), 4096, verbs.AccessZeroBased) }, verbs.ErrInvalidArgument, "iova"},
		{"zero-based iova 0", func() (*verbs.MR, error) { return pd.RegMRIOVA(make([]byte, 16), 0, verbs.AccessZeroBased) }, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mr, err := tt.reg()
			rdmatest.WantError(t, err, tt.want, tt.field)
			if mr != nil {
				if err := mr.Dereg(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestMRAccessors(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	buf := make([]byte, 4096)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if mr.IOVA() != uint64(uintptr(unsafe.Pointer(&buf[0]))) {
		t.Errorf("IOVA %#x is not the buffer's address", mr.IOVA())
	}
	if mr.LKey() != mr.RKey() || mr.LKey() == 0 || d.KeyIsMW(mr.RKey()) {
		t.Errorf("keys %#x %#x", mr.LKey(), mr.RKey())
	}
	if mr.Len() != len(buf) || mr.PD() != pd || &mr.Buf()[0] != &buf[0] {
		t.Error("MR accessors do not reflect the registration")
	}
	if d.LookupMR(mr.RKey()) != mr {
		t.Error("lookupMR does not find the MR")
	}
	if d.LookupMR(mr.RKey()^0xff) != nil || d.LookupMR(0) != nil || d.LookupMR(math.MaxUint32) != nil {
		t.Error("lookupMR accepts a wrong key")
	}
	sge := mr.SGE(100, 50)
	if sge != (verbs.SGE{Addr: mr.IOVA() + 100, Length: 50, LKey: mr.LKey()}) {
		t.Errorf("SGE = %+v", sge)
	}
	if mr.SGE(4096, 0).Length != 0 {
		t.Error("empty SGE at the end")
	}
	for _, r := range [][2]int{{-1, 1}, {0, 4097}, {4000, 97}, {4097, 0}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("SGE(%d, %d) did not panic", r[0], r[1])
				}
			}()
			mr.SGE(r[0], r[1])
		}()
	}
}

func TestMRReregZeroBasedRoundTrip(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	buf := make([]byte, 16)
	mr, err := pd.RegMRIOVA(buf, 0x10000, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		access verbs.AccessFlags
		iova   uint64
	}{{verbs.AccessZeroBased, 0}, {0, 0x10000}} {
		if err := mr.Rereg(verbs.ReregChangeAccess, nil, nil, step.access); err != nil {
			t.Fatal(err)
		}
		if mr.IOVA() != step.iova {
			t.Errorf("after access %v IOVA %#x, want %#x", step.access, mr.IOVA(), step.iova)
		}
	}
}
