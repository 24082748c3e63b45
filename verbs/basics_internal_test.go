package verbs

import (
	"errors"
	"net/netip"
	"testing"
)

func TestErrorFormatAndUnwrap(t *testing.T) {
	tests := []struct {
		err  *Error
		want string
	}{
		{newError("RegMR", "access", ErrInvalidArgument, "remote write requires local write"),
			"verbs: RegMR: access: remote write requires local write: invalid argument"},
		{newError("DeallocPD", "pd", ErrClosed, ""), "verbs: DeallocPD: pd: object already destroyed"},
		{newError("Close", "", ErrBusy, ""), "verbs: Close: resource busy"},
		{errorf("AllocPD", "max_pd", ErrResourceLimit, "all %d in use", 2),
			"verbs: AllocPD: max_pd: all 2 in use: resource limit reached: cannot allocate memory"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
		if errors.Unwrap(tt.err) != tt.err.Err {
			t.Errorf("Unwrap(%v) is not the sentinel", tt.err)
		}
	}
	if !errors.Is(newError("x", "", ErrResourceLimit, ""), ErrNoMemory) {
		t.Error("ErrResourceLimit does not match ErrNoMemory")
	}
	if errors.Is(newError("x", "", ErrNoMemory, ""), ErrResourceLimit) {
		t.Error("ErrNoMemory matches ErrResourceLimit")
	}
}

func TestAccessFlagValues(t *testing.T) {
	// The values of libibverbs/verbs.h.
	tests := []struct {
		a    AccessFlags
		want uint32
	}{
		{AccessLocalWrite, 1}, {AccessRemoteWrite, 2}, {AccessRemoteRead, 4},
		{AccessRemoteAtomic, 8}, {AccessMWBind, 16}, {AccessZeroBased, 32},
		{AccessOnDemand, 64}, {AccessHugeTLB, 128}, {AccessFlushGlobal, 256},
		{AccessFlushPersistent, 512}, {AccessRelaxedOrdering, 1 << 20},
		{accessOptionalRange, 0x3ff00000},
	}
	for _, tt := range tests {
		if uint32(tt.a) != tt.want {
			t.Errorf("%v = %#x, want %#x", tt.a, uint32(tt.a), tt.want)
		}
	}
}

func TestValidateQPAccess(t *testing.T) {
	tests := []struct {
		a    AccessFlags
		want error
	}{
		{0, nil},
		{AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic, nil},
		{AccessLocalWrite | AccessRemoteWrite, nil},
		{AccessRemoteRead | AccessRelaxedOrdering, nil},
		{AccessMWBind, ErrInvalidArgument},
		{AccessZeroBased, ErrInvalidArgument},
		{AccessOnDemand, ErrInvalidArgument},
		{1 << 15, ErrInvalidArgument},
	}
	for _, tt := range tests {
		wantErr(t, validateQPAccess("ModifyQP", tt.a), tt.want, "qp_access_flags")
	}
}

func TestGID(t *testing.T) {
	tests := []struct {
		addr string
		str  string
		v4   bool
	}{
		{"10.1.16.62", "::ffff:10.1.16.62", true},
		{"::ffff:10.1.16.62", "::ffff:10.1.16.62", true},
		{"fe80::250:56ff:fea7:7d03", "fe80::250:56ff:fea7:7d03", false},
		{"2001:db8::1", "2001:db8::1", false},
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		g := GIDFromAddr(a)
		if got := g.String(); got != tt.str {
			t.Errorf("GIDFromAddr(%v).String() = %q, want %q", a, got, tt.str)
		}
		if got := g.isIPv4Mapped(); got != tt.v4 {
			t.Errorf("GID %v isIPv4Mapped = %v, want %v", g, got, tt.v4)
		}
		if got, want := g.Addr(), a.Unmap(); got != want {
			t.Errorf("GID %v Addr() = %v, want %v", g, got, want)
		}
	}
	g := GIDFromAddr(netip.MustParseAddr("10.20.0.1"))
	wire := [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 20, 14: 0, 15: 1}
	if g != GID(wire) {
		t.Errorf("IPv4-mapped GID bytes = % x, want % x", g[:], wire[:])
	}
	if !(GID{}).IsZero() || g.IsZero() {
		t.Error("IsZero wrong")
	}
}

func TestInterfaceID(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.7")
	id := interfaceID(a, 4791)
	if id[3] != 0xff || id[4] != 0xfe {
		t.Errorf("interface id % x lacks the EUI-64 ff:fe", id)
	}
	// The MAC was locally administered (0x02 set), so the modified EUI-64
	// has the universal/local bit clear; the group bit stays clear.
	if id[0]&0x03 != 0 {
		t.Errorf("interface id % x has U/L or group bit set", id)
	}
	if interfaceID(a, 4791) != id {
		t.Error("interface id is not stable")
	}
	if interfaceID(a, 4792) == id {
		t.Error("interface id ignores the UDP port")
	}
	if interfaceID(netip.MustParseAddr("192.0.2.8"), 4791) == id {
		t.Error("interface id ignores the address")
	}
}
