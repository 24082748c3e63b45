package verbs_test

import (
	"testing"

	"github.com/goroce/goroce/verbs"
)

func TestAccessFlagsString(t *testing.T) {
	tests := []struct {
		a    verbs.AccessFlags
		want string
	}{
		{0, "0"},
		{verbs.AccessLocalWrite, "LOCAL_WRITE"},
		{verbs.AccessLocalWrite | verbs.AccessRemoteRead, "LOCAL_WRITE|REMOTE_READ"},
		{verbs.AccessRemoteAtomic | verbs.AccessFlushPersistent, "REMOTE_ATOMIC|FLUSH_PERSISTENT"},
		{verbs.AccessRelaxedOrdering | verbs.AccessZeroBased, "ZERO_BASED|RELAXED_ORDERING"},
		{1 << 12, "0x1000"},
	}
	for _, tt := range tests {
		if got := tt.a.String(); got != tt.want {
			t.Errorf("AccessFlags(%#x).String() = %q, want %q", uint32(tt.a), got, tt.want)
		}
	}
}

func TestMTU(t *testing.T) {
	tests := []struct {
		m     verbs.MTU
		bytes int
		str   string
	}{
		{verbs.MTU256, 256, "256"}, {verbs.MTU512, 512, "512"}, {verbs.MTU1024, 1024, "1024"},
		{verbs.MTU2048, 2048, "2048"}, {verbs.MTU4096, 4096, "4096"},
		{0, 0, "MTU(0)"}, {6, 0, "MTU(6)"},
	}
	for _, tt := range tests {
		if got := tt.m.Bytes(); got != tt.bytes {
			t.Errorf("MTU(%d).Bytes() = %d, want %d", int(tt.m), got, tt.bytes)
		}
		if got := tt.m.String(); got != tt.str {
			t.Errorf("MTU(%d).String() = %q, want %q", int(tt.m), got, tt.str)
		}
		if tt.bytes != 0 && verbs.MTUFromBytes(tt.bytes) != tt.m {
			t.Errorf("MTUFromBytes(%d) = %v, want %v", tt.bytes, verbs.MTUFromBytes(tt.bytes), tt.m)
		}
	}
	for _, tt := range []struct {
		n    int
		want verbs.MTU
	}{{0, 0}, {255, 0}, {1500 - 80, verbs.MTU1024}, {2047, verbs.MTU1024}, {9000 - 80, verbs.MTU4096}, {1 << 20, verbs.MTU4096}} {
		if got := verbs.MTUFromBytes(tt.n); got != tt.want {
			t.Errorf("MTUFromBytes(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

func TestGUIDAndGIDTypeString(t *testing.T) {
	if got := verbs.GUID(0x025056fffea77d03).String(); got != "0250:56ff:fea7:7d03" {
		t.Errorf("GUID String = %q", got)
	}
	for typ, want := range map[verbs.GIDType]string{verbs.GIDTypeIB: "IB", verbs.GIDTypeRoCEv1: "RoCE v1", verbs.GIDTypeRoCEv2: "RoCE v2", 7: "GIDType(7)"} {
		if got := typ.String(); got != want {
			t.Errorf("GIDType(%d).String() = %q, want %q", int(typ), got, want)
		}
	}
}

func TestEnumStrings(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{verbs.WCSuccess.String(), "success"},
		{verbs.WCLocLenErr.String(), "local length error"},
		{verbs.WCWRFlushErr.String(), "Work Request Flushed Error"},
		{verbs.WCRemInvReqErr.String(), "remote invalid request error"},
		{verbs.WCRetryExcErr.String(), "transport retry counter exceeded"},
		{verbs.WCRNRRetryExcErr.String(), "RNR retry counter exceeded"},
		{verbs.WCRemAbortErr.String(), "aborted error"},
		{verbs.WCTMRndvIncomplete.String(), "TM software rendezvous"},
		{verbs.WCStatus(99).String(), "unknown"},
		{verbs.WCStatus(-1).String(), "unknown"},
		{verbs.WCRecv.String(), "RECV"},
		{verbs.WCRecvRDMAWithImm.String(), "RECV_RDMA_WITH_IMM"},
		{verbs.WCOpcode(77).String(), "WCOpcode(77)"},
		{verbs.WRAtomicFetchAndAdd.String(), "atomic-fetch-and-add"},
		{verbs.WROpcode(12).String(), "WROpcode(12)"},
		{verbs.QPStateRTS.String(), "RTS"},
		{verbs.QPState(9).String(), "QPState(9)"},
		{verbs.QPTypeUD.String(), "UD"},
		{verbs.QPType(1).String(), "QPType(1)"},
		{verbs.PortActive.String(), "active"},
		{verbs.PortState(9).String(), "unknown"},
		{verbs.LinkLayerEthernet.String(), "Ethernet"},
		{verbs.AtomicHCA.String(), "ATOMIC_HCA"},
		{(verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrDestQPN).String(), "STATE|AV|DEST_QPN"},
		{(verbs.QPAttrRateLimit | 1<<22).String(), "0x400000|RATE_LIMIT"},
		{verbs.QPAttrMask(0).String(), "0"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	// Every status has a text (the table has no holes).
	for s := verbs.WCSuccess; s <= verbs.WCTMRndvIncomplete; s++ {
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
		{"IBV_WC_GENERAL_ERR", int(verbs.WCGeneralErr), 21},
		{"IBV_WC_RECV", int(verbs.WCRecv), 128},
		{"IBV_WC_RECV_RDMA_WITH_IMM", int(verbs.WCRecvRDMAWithImm), 129},
		{"IBV_WR_SEND_WITH_INV", int(verbs.WRSendWithInv), 9},
		{"IBV_WR_ATOMIC_WRITE", int(verbs.WRAtomicWrite), 15},
		{"IBV_QP_DEST_QPN", int(verbs.QPAttrDestQPN), 1 << 20},
		{"IBV_QP_RATE_LIMIT", int(verbs.QPAttrRateLimit), 1 << 25},
		{"IBV_QPT_UD", int(verbs.QPTypeUD), 4},
		{"IBV_QPS_ERR", int(verbs.QPStateErr), 6},
		{"IBV_SEND_INLINE", int(verbs.SendInline), 8},
		{"IBV_WC_WITH_INV", int(verbs.WCWithInv), 8},
		{"IBV_REREG_MR_CHANGE_ACCESS", int(verbs.ReregChangeAccess), 4},
		{"IBV_SRQ_LIMIT", int(verbs.SRQLimit), 2},
		{"IBV_DEVICE_SRQ_RESIZE", int(verbs.DeviceSRQResize), 1 << 13},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %d, want %d", tt.name, tt.got, tt.want)
		}
	}
}
