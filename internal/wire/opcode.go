package wire

import (
	"strconv"
	"strings"
)

// Opcode is the BTH opcode: the transport service in bits 7:5 and the
// operation in bits 4:0.
//
// The constants are named transport prefix + the IBTA operation name in
// CamelCase (ib_pack.h IB_OPCODE_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE becomes
// RCRDMAWriteOnlyWithImmediate). The reliable datagram (RD, 0x40) and XRC
// (0xA0) opcodes are not supported: Info reports them, like every other
// unassigned value, as unknown.
type Opcode uint8

// Reliable connection (RC) opcodes.
const (
	RCSendFirst                  Opcode = 0x00
	RCSendMiddle                 Opcode = 0x01
	RCSendLast                   Opcode = 0x02
	RCSendLastWithImmediate      Opcode = 0x03
	RCSendOnly                   Opcode = 0x04
	RCSendOnlyWithImmediate      Opcode = 0x05
	RCRDMAWriteFirst             Opcode = 0x06
	RCRDMAWriteMiddle            Opcode = 0x07
	RCRDMAWriteLast              Opcode = 0x08
	RCRDMAWriteLastWithImmediate Opcode = 0x09
	RCRDMAWriteOnly              Opcode = 0x0A
	RCRDMAWriteOnlyWithImmediate Opcode = 0x0B
	RCRDMAReadRequest            Opcode = 0x0C
	RCRDMAReadResponseFirst      Opcode = 0x0D
	RCRDMAReadResponseMiddle     Opcode = 0x0E
	RCRDMAReadResponseLast       Opcode = 0x0F
	RCRDMAReadResponseOnly       Opcode = 0x10
	RCAcknowledge                Opcode = 0x11
	RCAtomicAcknowledge          Opcode = 0x12
	RCCompareSwap                Opcode = 0x13
	RCFetchAdd                   Opcode = 0x14
	RCSendLastWithInvalidate     Opcode = 0x16
	RCSendOnlyWithInvalidate     Opcode = 0x17
	RCFlush                      Opcode = 0x1C
	RCAtomicWrite                Opcode = 0x1D
)

// Unreliable connection (UC) opcodes.
const (
	UCSendFirst                  Opcode = 0x20
	UCSendMiddle                 Opcode = 0x21
	UCSendLast                   Opcode = 0x22
	UCSendLastWithImmediate      Opcode = 0x23
	UCSendOnly                   Opcode = 0x24
	UCSendOnlyWithImmediate      Opcode = 0x25
	UCRDMAWriteFirst             Opcode = 0x26
	UCRDMAWriteMiddle            Opcode = 0x27
	UCRDMAWriteLast              Opcode = 0x28
	UCRDMAWriteLastWithImmediate Opcode = 0x29
	UCRDMAWriteOnly              Opcode = 0x2A
	UCRDMAWriteOnlyWithImmediate Opcode = 0x2B
)

// Unreliable datagram (UD) opcodes.
const (
	UDSendOnly              Opcode = 0x64
	UDSendOnlyWithImmediate Opcode = 0x65
)

// CNP is the RoCEv2 congestion notification packet (IBTA Annex A17): a BTH
// with BECN set (Parse does not insist), 16 reserved bytes and the ICRC.
const CNP Opcode = 0x81

// RCSACK is goroce's selective acknowledgement (sack.go), an RC response in
// the manufacturer-specific opcode range (0xC0-0xFF, IBTA 9.2.1): sent only
// to a peer that agreed to selective repeat, so rxe and NICs never see it.
const RCSACK Opcode = 0xC0

// CNPReservedLen is the number of reserved bytes after the BTH of a CNP. The
// parser returns them as the packet's payload.
const CNPReservedLen = 16

// Transport is the transport service an opcode belongs to.
type Transport uint8

// Transport services. The zero value marks an unknown opcode.
const (
	TransportUnknown Transport = iota
	TransportRC
	TransportUC
	TransportUD
	TransportCNP
)

var transportNames = [...]string{
	TransportUnknown: "unknown",
	TransportRC:      "RC",
	TransportUC:      "UC",
	TransportUD:      "UD",
	TransportCNP:     "CNP",
}

// String returns the IBTA abbreviation: "RC", "UC", "UD", "CNP".
func (t Transport) String() string {
	if int(t) < len(transportNames) {
		return transportNames[t]
	}
	return "Transport(" + strconv.Itoa(int(t)) + ")"
}

// Hdr is a set of extension headers, those that may follow the BTH.
//
// The bits are numbered in wire order: whenever an opcode carries several
// extension headers they appear after the BTH in increasing bit order (DETH
// before ImmDt for UD, FETH before RETH for FLUSH, RETH before ImmDt for
// RDMA WRITE, AETH before AtomicAckETH for ATOMIC_ACKNOWLEDGE).
type Hdr uint16

// Extension headers.
const (
	HdrDETH Hdr = 1 << iota
	HdrFETH
	HdrRETH
	HdrAtomicETH
	HdrAETH
	HdrAtomicAckETH
	HdrImmDt
	HdrIETH

	hdrCount = iota
)

var hdrInfo = [hdrCount]struct {
	name string
	len  int
}{
	{"DETH", DETHLen},
	{"FETH", FETHLen},
	{"RETH", RETHLen},
	{"AtomicETH", AtomicETHLen},
	{"AETH", AETHLen},
	{"AtomicAckETH", AtomicAckETHLen},
	{"ImmDt", ImmDtLen},
	{"IETH", IETHLen},
}

// Len returns the total length of the headers in h.
func (h Hdr) Len() int {
	n := 0
	for i := range hdrCount {
		if h&(1<<i) != 0 {
			n += hdrInfo[i].len
		}
	}
	return n
}

// String lists the headers in wire order, e.g. "RETH|ImmDt", or "none".
func (h Hdr) String() string {
	if h == 0 {
		return "none"
	}
	var sb strings.Builder
	for i := range hdrCount {
		if h&(1<<i) != 0 {
			if sb.Len() > 0 {
				sb.WriteByte('|')
			}
			sb.WriteString(hdrInfo[i].name)
		}
	}
	if rest := h &^ (1<<hdrCount - 1); rest != 0 {
		if sb.Len() > 0 {
			sb.WriteByte('|')
		}
		sb.WriteString("0x")
		sb.WriteString(strconv.FormatUint(uint64(rest), 16))
	}
	return sb.String()
}

// PayloadRule says how long the payload of an opcode may be. Lengths exclude
// the pad bytes; mtu is the path MTU in payload bytes (256 to 4096).
type PayloadRule uint8

// Payload rules (IBTA C9-92/C9-94, rxe check_length).
const (
	// PayloadNone: no payload and no pad (requests and acknowledgements
	// that are headers only).
	PayloadNone PayloadRule = iota
	// PayloadUpToMTU: 0 to mtu bytes (*_ONLY packets, UD sends).
	PayloadUpToMTU
	// PayloadEqualsMTU: exactly mtu bytes, no pad (FIRST and MIDDLE).
	PayloadEqualsMTU
	// PayloadLast: 1 to mtu bytes (LAST packets).
	PayloadLast
	// PayloadAtomicWrite: exactly 8 bytes, the value to write.
	PayloadAtomicWrite
	// PayloadCNP: the 16 reserved bytes of a congestion notification
	// packet.
	PayloadCNP
	// PayloadSACK: the bitmap of a selective acknowledgement, 4 to
	// SACKMaxLen bytes in whole 32-bit words, no pad (sack.go).
	PayloadSACK
)

// AtomicWriteLen is the payload length of an ATOMIC_WRITE.
const AtomicWriteLen = 8

var payloadRuleNames = [...]string{
	PayloadNone:        "none",
	PayloadUpToMTU:     "0..MTU",
	PayloadEqualsMTU:   "MTU",
	PayloadLast:        "1..MTU",
	PayloadAtomicWrite: "8",
	PayloadCNP:         "16 reserved",
	PayloadSACK:        "4..128 in words",
}

// String describes the allowed lengths, e.g. "1..MTU".
func (r PayloadRule) String() string {
	if int(r) < len(payloadRuleNames) {
		return payloadRuleNames[r]
	}
	return "PayloadRule(" + strconv.Itoa(int(r)) + ")"
}

// Check reports whether a payload of n bytes followed by pad pad bytes
// satisfies r, returning nil or an error that matches ErrPayloadLength, ErrMTU
// or ErrPadCount with errors.Is. Besides the length rule, n+pad must be a
// multiple of 4 and a pad needs a payload. An mtu of 0 (or less) skips the
// checks that depend on the path MTU. Check does not allocate.
func (r PayloadRule) Check(n, pad, mtu int) error {
	switch r {
	case PayloadNone:
		if n != 0 {
			return errUnexpectedPayload
		}
		if pad != 0 {
			return errPadNoPayload
		}
	case PayloadUpToMTU:
		if mtu > 0 && n > mtu {
			return errPayloadAboveMTU
		}
	case PayloadEqualsMTU:
		if pad != 0 {
			return errPadNotLast
		}
		if n == 0 {
			return errEmptyFirstMiddle
		}
		if mtu > 0 && n != mtu {
			return errPayloadNotMTU
		}
	case PayloadLast:
		if n == 0 {
			return errEmptyLast
		}
		if mtu > 0 && n > mtu {
			return errPayloadAboveMTU
		}
	case PayloadAtomicWrite:
		if n != AtomicWriteLen {
			return errAtomicWriteLen
		}
	case PayloadCNP:
		if n != CNPReservedLen {
			return errCNPLen
		}
	case PayloadSACK:
		if n < 4 || n > SACKMaxLen || n&3 != 0 || pad != 0 {
			return errSACKLen
		}
	}
	if n == 0 && pad != 0 {
		return errPadNoPayload
	}
	if (n+pad)&3 != 0 {
		return errUnaligned
	}
	return nil
}

// opFlags are the properties of an opcode.
type opFlags uint16

const (
	fFirst opFlags = 1 << iota
	fMiddle
	fLast
	fOnly
	fSend
	fWrite
	fReadRequest
	fReadResponse
	fAck
	fAtomic
	fAtomicWrite
	fFlush
	fImmediate
	fInvalidate
	fRequest
	fResponse
)

// OpInfo describes an opcode: what follows its BTH on the wire and what kind
// of operation it is. The zero OpInfo (Transport() == TransportUnknown)
// describes an unknown opcode.
//
// It is one machine word, packed, read through methods: the receive path
// passes it by value through several calls per packet. As a struct of
// fields it was passed in one register per field, spilled field by field
// and reloaded whole, and each such reload waited for the narrower stores
// before it (a store-forwarding stall): in a WRITE responder, about a
// tenth of the transport's time.
type OpInfo struct{ v uint64 }

// The fields of OpInfo.v.
const (
	opiFlags     = 0  // opFlags, 16 bits
	opiHeaders   = 16 // Hdr, 16 bits
	opiTransport = 32 // Transport, 8 bits
	opiPayload   = 40 // PayloadRule, 8 bits
	opiHeaderLen = 48 // 8 bits: at most 12 + 20 (FETH and RETH)
	opiOp        = 56 // the opcode, for Name
)

// makeOpInfo packs an OpInfo.
func makeOpInfo(o Opcode, t Transport, h Hdr, p PayloadRule, f opFlags) OpInfo {
	return OpInfo{uint64(f)<<opiFlags | uint64(h)<<opiHeaders | uint64(t)<<opiTransport |
		uint64(p)<<opiPayload | uint64(BTHLen+h.Len())<<opiHeaderLen | uint64(o)<<opiOp}
}

func (i OpInfo) flags() opFlags { return opFlags(i.v >> opiFlags) }

// Transport is the transport the opcode belongs to.
func (i OpInfo) Transport() Transport { return Transport(i.v >> opiTransport) }

// Headers are the extension headers after the BTH.
func (i OpInfo) Headers() Hdr { return Hdr(i.v >> opiHeaders) }

// HeaderLen is the length of the BTH and the extension headers.
func (i OpInfo) HeaderLen() int { return int(uint8(i.v >> opiHeaderLen)) }

// Payload is the rule for the payload length.
func (i OpInfo) Payload() PayloadRule { return PayloadRule(i.v >> opiPayload) }

// Name is the IBTA name with the transport prefix, as ib_pack.h and tshark
// spell it: "RC SEND_FIRST", "UD SEND_ONLY_WITH_IMMEDIATE"; "" for an
// unknown opcode.
func (i OpInfo) Name() string {
	if i.Transport() == TransportUnknown {
		return ""
	}
	return opRows[Opcode(i.v>>opiOp)].name
}

// IsFirst reports the first packet of a multi-packet message.
func (i OpInfo) IsFirst() bool { return i.flags()&fFirst != 0 }

// IsMiddle reports a middle packet of a multi-packet message.
func (i OpInfo) IsMiddle() bool { return i.flags()&fMiddle != 0 }

// IsLast reports the last packet of a multi-packet message.
func (i OpInfo) IsLast() bool { return i.flags()&fLast != 0 }

// IsOnly reports a packet that is a whole message by itself: the *_ONLY
// opcodes and the inherently single-packet ones (RDMA READ request, atomics,
// FLUSH, ATOMIC_WRITE, acknowledgements).
func (i OpInfo) IsOnly() bool { return i.flags()&fOnly != 0 }

// StartsMessage reports a FIRST or single-packet opcode: the responder's
// opcode-sequence check expects one of these after a message ended.
func (i OpInfo) StartsMessage() bool { return i.flags()&(fFirst|fOnly) != 0 }

// EndsMessage reports a LAST or single-packet opcode.
func (i OpInfo) EndsMessage() bool { return i.flags()&(fLast|fOnly) != 0 }

// IsSend reports a SEND packet (RC, UC or UD).
func (i OpInfo) IsSend() bool { return i.flags()&fSend != 0 }

// IsWrite reports an RDMA WRITE packet (not ATOMIC_WRITE).
func (i OpInfo) IsWrite() bool { return i.flags()&fWrite != 0 }

// IsReadRequest reports an RDMA READ request.
func (i OpInfo) IsReadRequest() bool { return i.flags()&fReadRequest != 0 }

// IsReadResponse reports an RDMA READ response packet. The responder also
// answers FLUSH and ATOMIC_WRITE with a zero-length READ_RESPONSE_ONLY.
func (i OpInfo) IsReadResponse() bool { return i.flags()&fReadResponse != 0 }

// IsAck reports ACKNOWLEDGE and ATOMIC_ACKNOWLEDGE. Read responses carry an
// AETH too (except MIDDLE) but are not acknowledge opcodes.
func (i OpInfo) IsAck() bool { return i.flags()&fAck != 0 }

// IsAtomic reports COMPARE_SWAP and FETCH_ADD, the requests with an
// AtomicETH that are answered by ATOMIC_ACKNOWLEDGE.
func (i OpInfo) IsAtomic() bool { return i.flags()&fAtomic != 0 }

// IsAtomicWrite reports ATOMIC_WRITE.
func (i OpInfo) IsAtomicWrite() bool { return i.flags()&fAtomicWrite != 0 }

// IsFlush reports FLUSH.
func (i OpInfo) IsFlush() bool { return i.flags()&fFlush != 0 }

// HasImmediate reports an opcode that carries an ImmDt header.
func (i OpInfo) HasImmediate() bool { return i.flags()&fImmediate != 0 }

// HasInvalidate reports an opcode that carries an IETH header.
func (i OpInfo) HasInvalidate() bool { return i.flags()&fInvalidate != 0 }

// IsRequest reports a packet sent by a requester: sends, writes, read
// requests, atomics, FLUSH and ATOMIC_WRITE.
func (i OpInfo) IsRequest() bool { return i.flags()&fRequest != 0 }

// IsResponse reports a packet sent by a responder: read responses and
// acknowledgements.
func (i OpInfo) IsResponse() bool { return i.flags()&fResponse != 0 }

// Info returns the description of o. It is a table lookup: it does not
// allocate.
func (o Opcode) Info() OpInfo { return opTable[o] }

// info returns a pointer into the table, for the parser's hot path.
func (o Opcode) info() *OpInfo { return &opTable[o] }

// Valid reports whether o is a supported opcode.
func (o Opcode) Valid() bool { return opTable[o].Transport() != TransportUnknown }

// String returns the IBTA name of o, e.g. "RC RDMA_READ_RESPONSE_MIDDLE", or
// "UNKNOWN(0x42)".
func (o Opcode) String() string {
	if n := opTable[o].Name(); n != "" {
		return n
	}
	const hex = "0123456789abcdef"
	return "UNKNOWN(0x" + string([]byte{hex[o>>4], hex[o&0xF]}) + ")"
}

// opRow is a row of the opcode table as written.
type opRow struct {
	name      string
	transport Transport
	headers   Hdr
	payload   PayloadRule
	flags     opFlags
}

// op builds a table row.
func op(name string, t Transport, h Hdr, p PayloadRule, f opFlags) opRow {
	return opRow{name, t, h, p, f}
}

// Request and response flag combinations used by the table.
const (
	sendReq  = fSend | fRequest
	writeReq = fWrite | fRequest
	readResp = fReadResponse | fResponse
)

// opTable is indexed by opcode. Each row was checked against rxe_opcode.c
// (headers and their order, lengths, START/MIDDLE/END masks) and ib_pack.h
// (values); FLUSH and ATOMIC_WRITE follow the rxe patches that added them.
var opRows = [256]opRow{
	RCSendFirst:                  op("RC SEND_FIRST", TransportRC, 0, PayloadEqualsMTU, sendReq|fFirst),
	RCSendMiddle:                 op("RC SEND_MIDDLE", TransportRC, 0, PayloadEqualsMTU, sendReq|fMiddle),
	RCSendLast:                   op("RC SEND_LAST", TransportRC, 0, PayloadLast, sendReq|fLast),
	RCSendLastWithImmediate:      op("RC SEND_LAST_WITH_IMMEDIATE", TransportRC, HdrImmDt, PayloadLast, sendReq|fLast|fImmediate),
	RCSendOnly:                   op("RC SEND_ONLY", TransportRC, 0, PayloadUpToMTU, sendReq|fOnly),
	RCSendOnlyWithImmediate:      op("RC SEND_ONLY_WITH_IMMEDIATE", TransportRC, HdrImmDt, PayloadUpToMTU, sendReq|fOnly|fImmediate),
	RCRDMAWriteFirst:             op("RC RDMA_WRITE_FIRST", TransportRC, HdrRETH, PayloadEqualsMTU, writeReq|fFirst),
	RCRDMAWriteMiddle:            op("RC RDMA_WRITE_MIDDLE", TransportRC, 0, PayloadEqualsMTU, writeReq|fMiddle),
	RCRDMAWriteLast:              op("RC RDMA_WRITE_LAST", TransportRC, 0, PayloadLast, writeReq|fLast),
	RCRDMAWriteLastWithImmediate: op("RC RDMA_WRITE_LAST_WITH_IMMEDIATE", TransportRC, HdrImmDt, PayloadLast, writeReq|fLast|fImmediate),
	RCRDMAWriteOnly:              op("RC RDMA_WRITE_ONLY", TransportRC, HdrRETH, PayloadUpToMTU, writeReq|fOnly),
	RCRDMAWriteOnlyWithImmediate: op("RC RDMA_WRITE_ONLY_WITH_IMMEDIATE", TransportRC, HdrRETH|HdrImmDt, PayloadUpToMTU, writeReq|fOnly|fImmediate),
	RCRDMAReadRequest:            op("RC RDMA_READ_REQUEST", TransportRC, HdrRETH, PayloadNone, fReadRequest|fRequest|fOnly),
	RCRDMAReadResponseFirst:      op("RC RDMA_READ_RESPONSE_FIRST", TransportRC, HdrAETH, PayloadEqualsMTU, readResp|fFirst),
	RCRDMAReadResponseMiddle:     op("RC RDMA_READ_RESPONSE_MIDDLE", TransportRC, 0, PayloadEqualsMTU, readResp|fMiddle),
	RCRDMAReadResponseLast:       op("RC RDMA_READ_RESPONSE_LAST", TransportRC, HdrAETH, PayloadLast, readResp|fLast),
	RCRDMAReadResponseOnly:       op("RC RDMA_READ_RESPONSE_ONLY", TransportRC, HdrAETH, PayloadUpToMTU, readResp|fOnly),
	RCAcknowledge:                op("RC ACKNOWLEDGE", TransportRC, HdrAETH, PayloadNone, fAck|fResponse|fOnly),
	RCAtomicAcknowledge:          op("RC ATOMIC_ACKNOWLEDGE", TransportRC, HdrAETH|HdrAtomicAckETH, PayloadNone, fAck|fResponse|fOnly),
	RCCompareSwap:                op("RC COMPARE_SWAP", TransportRC, HdrAtomicETH, PayloadNone, fAtomic|fRequest|fOnly),
	RCFetchAdd:                   op("RC FETCH_ADD", TransportRC, HdrAtomicETH, PayloadNone, fAtomic|fRequest|fOnly),
	RCSendLastWithInvalidate:     op("RC SEND_LAST_WITH_INVALIDATE", TransportRC, HdrIETH, PayloadLast, sendReq|fLast|fInvalidate),
	RCSendOnlyWithInvalidate:     op("RC SEND_ONLY_WITH_INVALIDATE", TransportRC, HdrIETH, PayloadUpToMTU, sendReq|fOnly|fInvalidate),
	RCFlush:                      op("RC FLUSH", TransportRC, HdrFETH|HdrRETH, PayloadNone, fFlush|fRequest|fOnly),
	RCAtomicWrite:                op("RC ATOMIC_WRITE", TransportRC, HdrRETH, PayloadAtomicWrite, fAtomicWrite|fRequest|fOnly),

	UCSendFirst:                  op("UC SEND_FIRST", TransportUC, 0, PayloadEqualsMTU, sendReq|fFirst),
	UCSendMiddle:                 op("UC SEND_MIDDLE", TransportUC, 0, PayloadEqualsMTU, sendReq|fMiddle),
	UCSendLast:                   op("UC SEND_LAST", TransportUC, 0, PayloadLast, sendReq|fLast),
	UCSendLastWithImmediate:      op("UC SEND_LAST_WITH_IMMEDIATE", TransportUC, HdrImmDt, PayloadLast, sendReq|fLast|fImmediate),
	UCSendOnly:                   op("UC SEND_ONLY", TransportUC, 0, PayloadUpToMTU, sendReq|fOnly),
	UCSendOnlyWithImmediate:      op("UC SEND_ONLY_WITH_IMMEDIATE", TransportUC, HdrImmDt, PayloadUpToMTU, sendReq|fOnly|fImmediate),
	UCRDMAWriteFirst:             op("UC RDMA_WRITE_FIRST", TransportUC, HdrRETH, PayloadEqualsMTU, writeReq|fFirst),
	UCRDMAWriteMiddle:            op("UC RDMA_WRITE_MIDDLE", TransportUC, 0, PayloadEqualsMTU, writeReq|fMiddle),
	UCRDMAWriteLast:              op("UC RDMA_WRITE_LAST", TransportUC, 0, PayloadLast, writeReq|fLast),
	UCRDMAWriteLastWithImmediate: op("UC RDMA_WRITE_LAST_WITH_IMMEDIATE", TransportUC, HdrImmDt, PayloadLast, writeReq|fLast|fImmediate),
	UCRDMAWriteOnly:              op("UC RDMA_WRITE_ONLY", TransportUC, HdrRETH, PayloadUpToMTU, writeReq|fOnly),
	UCRDMAWriteOnlyWithImmediate: op("UC RDMA_WRITE_ONLY_WITH_IMMEDIATE", TransportUC, HdrRETH|HdrImmDt, PayloadUpToMTU, writeReq|fOnly|fImmediate),

	UDSendOnly:              op("UD SEND_ONLY", TransportUD, HdrDETH, PayloadUpToMTU, sendReq|fOnly),
	UDSendOnlyWithImmediate: op("UD SEND_ONLY_WITH_IMMEDIATE", TransportUD, HdrDETH|HdrImmDt, PayloadUpToMTU, sendReq|fOnly|fImmediate),

	CNP: op("CNP", TransportCNP, 0, PayloadCNP, 0),

	RCSACK: op("RC GOROCE_SACK_ACKNOWLEDGE", TransportRC, HdrAETH, PayloadSACK, fAck|fResponse|fOnly),
}

// opTable is opRows packed; unknown opcodes' entries are zero.
var opTable = func() (t [256]OpInfo) {
	for o, r := range opRows {
		if r.transport != TransportUnknown {
			t[o] = makeOpInfo(Opcode(o), r.transport, r.headers, r.payload, r.flags)
		}
	}
	return t
}()
