package cm

import (
	"testing"

	"github.com/goroce/goroce/internal/mad"
)

// TestConstants: the public constants keep the wire's values.
func TestConstants(t *testing.T) {
	eq := func(name string, got, want uint64) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	eq("PortSpaceTCP", uint64(PortSpaceTCP), uint64(mad.PortSpaceTCP))
	eq("PortSpaceUDP", uint64(PortSpaceUDP), uint64(mad.PortSpaceUDP))
	eq("PortSpaceIPoIB", uint64(PortSpaceIPoIB), uint64(mad.PortSpaceIPoIB))
	eq("MaxConnectPrivateData", MaxConnectPrivateData, mad.REQPrivateDataSize-mad.CMAHeaderSize)
	eq("MaxAcceptPrivateData", MaxAcceptPrivateData, mad.REPPrivateDataSize)
	eq("MaxRejectPrivateData", MaxRejectPrivateData, mad.REJPrivateDataSize)
	eq("MaxUDConnectPrivateData", MaxUDConnectPrivateData, mad.SIDRREQPrivateDataSize-mad.CMAHeaderSize)
	eq("MaxUDAcceptPrivateData", MaxUDAcceptPrivateData, mad.SIDRREPPrivateDataSize)
	for r, m := range map[RejectReason]mad.RejectReason{
		RejectNoQP: mad.RejectNoQP, RejectNoResources: mad.RejectNoResources, RejectTimeout: mad.RejectTimeout,
		RejectUnsupported: mad.RejectUnsupported, RejectInvalidServiceID: mad.RejectInvalidServiceID,
		RejectInvalidTransportType: mad.RejectInvalidTransportType, RejectStaleConnection: mad.RejectStaleConnection,
		RejectInvalidGID: mad.RejectInvalidGID, RejectInvalidMTU: mad.RejectInvalidMTU, RejectConsumer: mad.RejectConsumer,
		RejectVendorOption: mad.RejectVendorOptionNotSupported,
	} {
		eq(r.String(), uint64(r), uint64(m))
	}
	for s, m := range map[SIDRStatus]mad.SIDRStatus{SIDRSuccess: mad.SIDRSuccess, SIDRUnsupported: mad.SIDRUnsupported,
		SIDRReject: mad.SIDRReject, SIDRNoQP: mad.SIDRNoQP} {
		eq(s.String(), uint64(s), uint64(m))
	}
	if EventTimewaitExit != 15 || EventConnectRequest != 4 || EventEstablished != 9 {
		t.Error("event types do not have librdmacm's values")
	}
}
