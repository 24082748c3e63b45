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

func TestAccessFlagsString(t *testing.T) {
	tests := []struct {
		a    AccessFlags
		want string
	}{
		{0, "0"},
		{AccessLocalWrite, "LOCAL_WRITE"},
		{AccessLocalWrite | AccessRemoteRead, "LOCAL_WRITE|REMOTE_READ"},
		{AccessRemoteAtomic | AccessFlushPersistent, "REMOTE_ATOMIC|FLUSH_PERSISTENT"},
		{AccessRelaxedOrdering | AccessZeroBased, "ZERO_BASED|RELAXED_ORDERING"},
		{1 << 12, "0x1000"},
	}
	for _, tt := range tests {
		if got := tt.a.String(); got != tt.want {
			t.Errorf("AccessFlags(%#x).String() = %q, want %q", uint32(tt.a), got, tt.want)
		}
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

func TestMTU(t *testing.T) {
	tests := []struct {
		m     MTU
		bytes int
		str   string
	}{
		{MTU256, 256, "256"}, {MTU512, 512, "512"}, {MTU1024, 1024, "1024"},
		{MTU2048, 2048, "2048"}, {MTU4096, 4096, "4096"},
		{0, 0, "MTU(0)"}, {6, 0, "MTU(6)"},
	}
	for _, tt := range tests {
		if got := tt.m.Bytes(); got != tt.bytes {
			t.Errorf("MTU(%d).Bytes() = %d, want %d", int(tt.m), got, tt.bytes)
		}
		if got := tt.m.String(); got != tt.str {
			t.Errorf("MTU(%d).String() = %q, want %q", int(tt.m), got, tt.str)
		}
		if tt.bytes != 0 && MTUFromBytes(tt.bytes) != tt.m {
			t.Errorf("MTUFromBytes(%d) = %v, want %v", tt.bytes, MTUFromBytes(tt.bytes), tt.m)
		}
	}
	for _, tt := range []struct {
		n    int
		want MTU
	}{{0, 0}, {255, 0}, {1500 - 80, MTU1024}, {2047, MTU1024}, {9000 - 80, MTU4096}, {1 << 20, MTU4096}} {
		if got := MTUFromBytes(tt.n); got != tt.want {
			t.Errorf("MTUFromBytes(%d) = %v, want %v", tt.n, got, tt.want)
		}
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

func TestGUIDAndGIDTypeString(t *testing.T) {
	if got := GUID(0x025056fffea77d03).String(); got != "0250:56ff:fea7:7d03" {
		t.Errorf("GUID String = %q", got)
	}
	for typ, want := range map[GIDType]string{GIDTypeIB: "IB", GIDTypeRoCEv1: "RoCE v1", GIDTypeRoCEv2: "RoCE v2", 7: "GIDType(7)"} {
		if got := typ.String(); got != want {
			t.Errorf("GIDType(%d).String() = %q, want %q", int(typ), got, want)
		}
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

func TestEnumStrings(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{WCSuccess.String(), "success"},
		{WCLocLenErr.String(), "local length error"},
		{WCWRFlushErr.String(), "Work Request Flushed Error"},
		{WCRemInvReqErr.String(), "remote invalid request error"},
		{WCRetryExcErr.String(), "transport retry counter exceeded"},
		{WCRNRRetryExcErr.String(), "RNR retry counter exceeded"},
		{WCRemAbortErr.String(), "aborted error"},
		{WCTMRndvIncomplete.String(), "TM software rendezvous"},
		{WCStatus(99).String(), "unknown"},
		{WCStatus(-1).String(), "unknown"},
		{WCRecv.String(), "RECV"},
		{WCRecvRDMAWithImm.String(), "RECV_RDMA_WITH_IMM"},
		{WCOpcode(77).String(), "WCOpcode(77)"},
		{WRAtomicFetchAndAdd.String(), "atomic-fetch-and-add"},
		{WROpcode(12).String(), "WROpcode(12)"},
		{QPStateRTS.String(), "RTS"},
		{QPState(9).String(), "QPState(9)"},
		{QPTypeUD.String(), "UD"},
		{QPType(1).String(), "QPType(1)"},
		{PortActive.String(), "active"},
		{PortState(9).String(), "unknown"},
		{LinkLayerEthernet.String(), "Ethernet"},
		{AtomicHCA.String(), "ATOMIC_HCA"},
		{(QPAttrState | QPAttrAV | QPAttrDestQPN).String(), "STATE|AV|DEST_QPN"},
		{(QPAttrRateLimit | 1<<22).String(), "0x400000|RATE_LIMIT"},
		{QPAttrMask(0).String(), "0"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	// Every status has a text (the table has no holes).
	for s := WCSuccess; s <= WCTMRndvIncomplete; s++ {
		if s.String() == "" || s.String() == "unknown" {
			t.Errorf("WCStatus(%d) has no text", int(s))
		}
	}
}

func TestEnumValues(t *testing.T) {
	// Spot checks against libibverbs/verbs.h.
	tests := []struct {
		name      string
		got, want int
	}{
		{"IBV_WC_GENERAL_ERR", int(WCGeneralErr), 21},
		{"IBV_WC_RECV", int(WCRecv), 128},
		{"IBV_WC_RECV_RDMA_WITH_IMM", int(WCRecvRDMAWithImm), 129},
		{"IBV_WR_SEND_WITH_INV", int(WRSendWithInv), 9},
		{"IBV_WR_ATOMIC_WRITE", int(WRAtomicWrite), 15},
		{"IBV_QP_DEST_QPN", int(QPAttrDestQPN), 1 << 20},
		{"IBV_QP_RATE_LIMIT", int(QPAttrRateLimit), 1 << 25},
		{"IBV_QPT_UD", int(QPTypeUD), 4},
		{"IBV_QPS_ERR", int(QPStateErr), 6},
		{"IBV_SEND_INLINE", int(SendInline), 8},
		{"IBV_WC_WITH_INV", int(WCWithInv), 8},
		{"IBV_REREG_MR_CHANGE_ACCESS", int(ReregChangeAccess), 4},
		{"IBV_SRQ_LIMIT", int(SRQLimit), 2},
		{"IBV_DEVICE_SRQ_RESIZE", int(DeviceSRQResize), 1 << 13},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %d, want %d", tt.name, tt.got, tt.want)
		}
	}
}
