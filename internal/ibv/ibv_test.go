package ibv

import (
	"strings"
	"testing"
)

// TestEveryValueNamed checks that each declared value has a name of its own,
// not the fallback for values libibverbs does not define. The texts are
// checked through the public API (verbs' basics tests).
func TestEveryValueNamed(t *testing.T) {
	named := func(kind, s, fallback string) {
		t.Helper()
		if s == "" || strings.HasPrefix(s, fallback) {
			t.Errorf("%s: %q", kind, s)
		}
	}
	for _, o := range []WROpcode{WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRRDMARead,
		WRAtomicCmpAndSwp, WRAtomicFetchAndAdd, WRLocalInv, WRBindMW, WRSendWithInv, WRTSO, WRDriver1,
		WRFlush, WRAtomicWrite} {
		named("WROpcode", o.String(), "WROpcode(")
	}
	for _, o := range []WCOpcode{WCSend, WCRDMAWrite, WCRDMARead, WCCompSwap, WCFetchAdd, WCBindMW,
		WCLocalInv, WCTSO, WCFlush, WCAtomicWrite, WCRecv, WCRecvRDMAWithImm} {
		named("WCOpcode", o.String(), "WCOpcode(")
	}
	for s := WCSuccess; s <= WCTMRndvIncomplete; s++ {
		named("WCStatus", s.String(), "unknown")
	}
	for _, q := range []QPType{QPTypeRC, QPTypeUC, QPTypeUD, QPTypeRawPacket, QPTypeXRCSend, QPTypeXRCRecv, QPTypeDriver} {
		named("QPType", q.String(), "QPType(")
	}
	for s := QPStateReset; s <= QPStateUnknown; s++ {
		named("QPState", s.String(), "QPState(")
	}
	for m := MTU256; m <= MTU4096; m++ {
		named("MTU", m.String(), "MTU(")
	}
	for a := AccessLocalWrite; a <= AccessFlushPersistent; a <<= 1 {
		named("AccessFlags", a.String(), "0x")
	}
	named("AccessFlags", AccessRelaxedOrdering.String(), "0x")
}

// TestNamesDistinct checks that no two values of an enum print alike.
func TestNamesDistinct(t *testing.T) {
	seen := map[string]int{}
	for i := -1; i <= 300; i++ {
		for _, s := range []string{"WR " + WROpcode(i).String(), "WC " + WCOpcode(i).String(), "QPT " + QPType(i).String(), "QPS " + QPState(i).String()} {
			seen[s]++
		}
	}
	for s, n := range seen {
		if n > 1 {
			t.Errorf("%q printed for %d values", s, n)
		}
	}
}
