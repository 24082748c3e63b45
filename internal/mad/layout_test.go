package mad

import (
	"encoding/binary"
	"testing"
)

// layout is where a message's fields and byte ranges lie, as its encoder
// and parser use them. A variable-length part (the REJ's ARI, the info of
// SIDR_REP and APR) is given by its span and the field holding its length.
type layout struct {
	fields []field
	spans  []span
	varLen field // length of varBuf; width 0 if none
	varBuf span
}

func pathFields(l *pathLayout) []field {
	return []field{l.localLID, l.remoteLID, l.flowLabel, l.packetRate, l.trafficClass,
		l.hopLimit, l.sl, l.subnetLocal, l.ackTimeout}
}

var layouts = map[AttrID]layout{
	AttrREQ: {
		fields: append(append([]field{reqLocalCommID, reqVendorID, reqServiceID, reqLocalCAGUID,
			reqLocalQKey, reqLocalQPN, reqRespResources, reqLocalEECN, reqInitiatorDepth, reqRemoteEECN,
			reqRemoteRespTO, reqTransportType, reqE2EFlowControl, reqStartingPSN, reqLocalRespTO,
			reqRetryCount, reqPKey, reqPathMTU, reqRDCExists, reqRNRRetryCount, reqMaxCMRetries, reqSRQ,
			reqExtTransport, reqSAPSupported}, pathFields(&reqPrimary)...), pathFields(&reqAlternate)...),
		spans: []span{reqPrimary.localGID, reqPrimary.remoteGID, reqAlternate.localGID,
			reqAlternate.remoteGID, reqPrivateData},
	},
	AttrREP: {
		fields: []field{repLocalCommID, repRemoteCommID, repLocalQKey, repLocalQPN, repVendorIDHigh,
			repLocalEECN, repVendorIDMid, repStartingPSN, repVendorIDLow, repRespResources, repInitDepth,
			repTargetACKDly, repFailover, repE2EFlowCtl, repRNRRetryCount, repSRQ, repLocalCAGUID},
		spans: []span{repPrivateData},
	},
	AttrREJ: {
		fields: []field{rejLocalCommID, rejRemoteCommID, rejMsgRejected, rejInfoLength, rejReason},
		spans:  []span{rejPrivateData}, varLen: rejInfoLength, varBuf: rejARI,
	},
	AttrMRA:  {fields: []field{commLocal, commRemote, mraMsgMRAed, mraServiceTimeout}, spans: []span{mraPrivateData}},
	AttrRTU:  {fields: []field{commLocal, commRemote}, spans: []span{rtuPrivateData}},
	AttrDREQ: {fields: []field{commLocal, commRemote, dreqRemoteQPN}, spans: []span{dreqPrivateData}},
	AttrDREP: {fields: []field{commLocal, commRemote}, spans: []span{drepPrivateData}},
	AttrSIDRREQ: {fields: []field{sidrReqRequestID, sidrReqPKey, sidrReqServiceID},
		spans: []span{sidrReqPrivateData}},
	AttrSIDRREP: {
		fields: []field{sidrRepRequestID, sidrRepStatus, sidrRepInfoLength, sidrRepVendorHigh,
			sidrRepQPN, sidrRepVendorLow, sidrRepServiceID, sidrRepQKey},
		spans: []span{sidrRepPrivateData}, varLen: sidrRepInfoLength, varBuf: sidrRepInfo,
	},
	AttrLAP: {
		fields: append([]field{commLocal, commRemote, lapRemoteQPN, lapRemoteRespTO}, pathFields(&lapPath)...),
		spans:  []span{lapPath.localGID, lapPath.remoteGID, lapPrivateData},
	},
	AttrAPR: {
		fields: []field{commLocal, commRemote, aprInfoLength, aprStatus},
		spans:  []span{aprPrivateData}, varLen: aprInfoLength, varBuf: aprInfo,
	},
}

// reservedBits is the number of reserved bits of each message, counted by
// hand from IBA vol. 1 tables 106-120 as the kernel's ibta_vol1_c12.h
// encodes them (the variable-length buffers counted as used).
var reservedBits = map[AttrID]int{
	// byte 4; bytes 24-27; 6 bits between flow label and rate, 3 after
	// SubnetLocal, 3 after the ACK timeout, for the primary path and the
	// alternate (whose last byte also holds SAPSupported: 2).
	AttrREQ:     8 + 32 + 6 + 3 + 3 + 6 + 3 + 2,
	AttrREP:     4, // after SRQ in byte 27
	AttrREJ:     6 + 1,
	AttrMRA:     6 + 3,
	AttrRTU:     0,
	AttrDREQ:    8, // after RemoteQPN
	AttrDREP:    0,
	AttrSIDRREQ: 16,
	AttrSIDRREP: 0,
	// bytes 8-11 and 16-19; 3 after the response timeout; 4 after the
	// flow label, 2 before the rate, 3 after SubnetLocal, 3 after the ACK
	// timeout.
	AttrLAP: 32 + 3 + 32 + 4 + 2 + 3 + 3,
	AttrAPR: 16,
}

// usedMask returns a body with every bit that l defines set, the variable
// buffer counted as n bytes long.
func (l *layout) usedMask(n int) []byte {
	m := make([]byte, BodySize)
	for _, f := range l.fields {
		f.put(m, f.mask())
	}
	for _, s := range append(l.spans, span{l.varBuf.off, n}) {
		for i := range s.len {
			m[s.off+i] = 0xFF
		}
	}
	return m
}

func popcount(b []byte) (n int) {
	for _, x := range b {
		for ; x != 0; x &= x - 1 {
			n++
		}
	}
	return n
}

func TestFieldsInsideWords(t *testing.T) {
	for a, l := range layouts {
		for _, f := range l.fields {
			if f.width == 64 {
				if f.off%4 != 0 || f.bit != 0 {
					t.Errorf("%v: 64-bit field %+v not on a 4-byte boundary", a, f)
				}
				continue
			}
			if f.shift() < 0 || f.width <= 0 || f.bit > 7 || f.off+4-(f.off&3) > BodySize {
				t.Errorf("%v: field %+v crosses its 32-bit word or the body", a, f)
			}
		}
	}
}

func TestLayoutNoOverlapAndReservedCount(t *testing.T) {
	for a, l := range layouts {
		seen := make([]byte, BodySize)
		claim := func(m []byte, what any) {
			for i := range m {
				if seen[i]&m[i] != 0 {
					t.Errorf("%v: %v overlaps another field at byte %d", a, what, i)
				}
				seen[i] |= m[i]
			}
		}
		for _, f := range l.fields {
			m := make([]byte, BodySize)
			f.put(m, f.mask())
			claim(m, f)
		}
		for _, s := range append(l.spans, l.varBuf) {
			m := make([]byte, BodySize)
			for i := range s.len {
				m[s.off+i] = 0xFF
			}
			claim(m, s)
		}
		if got, want := BodySize*8-popcount(seen), reservedBits[a]; got != want {
			t.Errorf("%v: %d reserved bits, IBA's table has %d", a, got, want)
		}
	}
}

func TestFieldGetPut(t *testing.T) {
	b := make([]byte, 8)
	f := field{1, 3, 9} // bits 11..19 of the first word
	f.put(b, 0x1FF)
	if got := binary.BigEndian.Uint32(b); got != 0x001FF000 {
		t.Fatalf("put: word %#08x, want 0x001ff000", got)
	}
	if f.get(b) != 0x1FF {
		t.Fatalf("get: %#x", f.get(b))
	}
	g := field{0, 0, 8}
	g.put(b, 0xAB)
	if f.get(b) != 0x1FF || b[0] != 0xAB {
		t.Fatalf("put disturbed a neighbour: % x", b)
	}
	if f.fits(0x200) || !f.fits(0x1FF) {
		t.Fatal("fits")
	}
}
