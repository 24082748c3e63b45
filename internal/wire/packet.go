package wire

import "encoding/binary"

// ICRCLen is the length of the invariant CRC that ends every RoCEv2 packet.
const ICRCLen = 4

// Packet is a parsed RoCEv2 transport packet: views of its headers, payload,
// pad and ICRC, all subslices of the parsed buffer (nothing is copied). A
// header the opcode does not carry is nil.
//
// A Packet is meant to be reused: Parse overwrites every field.
type Packet struct {
	BTH          BTH
	DETH         DETH
	FETH         FETH
	RETH         RETH
	AtomicETH    AtomicETH
	AETH         AETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH

	Payload []byte // without the pad; for a CNP, the 16 reserved bytes
	Pad     []byte // 0-3 bytes, normally zero (not checked)
	ICRC    []byte // the last 4 bytes

	// Raw is the whole packet, BTH through ICRC: what CheckICRC takes.
	Raw []byte
}

// Parse parses b, the payload of a UDP datagram to port 4791 (BTH through
// ICRC), into p. mtu is the path MTU in payload bytes (256 to 4096); 0 skips
// the checks that depend on it, for tools that do not know the path MTU.
//
// Parse checks what the wire format alone determines, in this order: the
// packet holds a BTH; TVer is 0; the opcode is known; the packet holds the
// opcode's extension headers and an ICRC; and what follows the headers obeys
// the opcode's payload rule (PayloadRule.Check): the length rule, pad only
// with a payload, and payload plus pad a multiple of 4 bytes (every header
// is, so the packet length must be too).
//
// It does not check the ICRC (that needs the IP header: CheckICRC), nor
// anything that needs QP state: P_Key, Q_Key, destination QP, PSN, opcode
// sequence, or the RETH DMA length (at most 2^31, C9-92; a responder check).
//
// On error p is zeroed and the error is a *ParseError wrapping ErrTruncated,
// ErrBadTVer, ErrUnknownOpcode, ErrPadCount, ErrPayloadLength or ErrMTU.
// Parse does not allocate and never panics, whatever b holds.
func (p *Packet) Parse(b []byte, mtu int) error {
	*p = Packet{}
	if len(b) < BTHLen {
		return errTruncatedBTH
	}
	bth := BTH(b[:BTHLen:BTHLen])
	if bth.TVer() != 0 {
		return errBadTVer
	}
	info := bth.Opcode().info()
	if info.Transport() == TransportUnknown {
		return errUnknownOpcode
	}
	if len(b) < info.HeaderLen()+ICRCLen {
		return truncatedHeader(info.Headers(), len(b))
	}

	end := len(b) - ICRCLen
	rest := end - info.HeaderLen() // payload and pad
	pad := int(bth.PadCount())
	if pad > rest {
		return errPadNoPayload
	}
	if err := info.Payload().Check(rest-pad, pad, mtu); err != nil {
		return err
	}

	p.BTH = bth
	off := BTHLen
	if h := info.Headers(); h != 0 {
		// Wire order is bit order (see Hdr).
		if h&HdrDETH != 0 {
			p.DETH = DETH(b[off : off+DETHLen : off+DETHLen])
			off += DETHLen
		}
		if h&HdrFETH != 0 {
			p.FETH = FETH(b[off : off+FETHLen : off+FETHLen])
			off += FETHLen
		}
		if h&HdrRETH != 0 {
			p.RETH = RETH(b[off : off+RETHLen : off+RETHLen])
			off += RETHLen
		}
		if h&HdrAtomicETH != 0 {
			p.AtomicETH = AtomicETH(b[off : off+AtomicETHLen : off+AtomicETHLen])
			off += AtomicETHLen
		}
		if h&HdrAETH != 0 {
			p.AETH = AETH(b[off : off+AETHLen : off+AETHLen])
			off += AETHLen
		}
		if h&HdrAtomicAckETH != 0 {
			p.AtomicAckETH = AtomicAckETH(b[off : off+AtomicAckETHLen : off+AtomicAckETHLen])
			off += AtomicAckETHLen
		}
		if h&HdrImmDt != 0 {
			p.ImmDt = ImmDt(b[off : off+ImmDtLen : off+ImmDtLen])
			off += ImmDtLen
		}
		if h&HdrIETH != 0 {
			p.IETH = IETH(b[off : off+IETHLen : off+IETHLen])
			off += IETHLen
		}
	}
	p.Payload = b[off : end-pad : end-pad]
	p.Pad = b[end-pad : end : end]
	p.ICRC = b[end:len(b):len(b)]
	p.Raw = b
	return nil
}

// truncatedHeader returns the error for a packet of n bytes that ends inside
// the extension headers hs or the ICRC.
func truncatedHeader(hs Hdr, n int) error {
	off := BTHLen
	for i := range hdrCount {
		if hs&(1<<i) == 0 {
			continue
		}
		off += hdrInfo[i].len
		if n < off {
			return errTruncatedHdr[i]
		}
	}
	return errTruncatedICRC
}

// Info returns the description of the packet's opcode.
func (p *Packet) Info() OpInfo {
	if p.BTH == nil {
		return OpInfo{}
	}
	return p.BTH.Opcode().Info()
}

// Has reports whether the packet carries all the extension headers in h.
func (p *Packet) Has(h Hdr) bool {
	return p.BTH != nil && p.BTH.Opcode().info().Headers()&h == h
}

// HeaderBytes returns the BTH and the extension headers, as one slice.
func (p *Packet) HeaderBytes() []byte {
	if p.BTH == nil {
		return nil
	}
	return p.Raw[:p.BTH.Opcode().info().HeaderLen()]
}

// StoredICRC returns the ICRC carried by the packet. It is sent least
// significant byte first.
func (p *Packet) StoredICRC() uint32 {
	if p.ICRC == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(p.ICRC)
}

// Headers returns the values of all the packet's headers, ready for
// AppendHeaders. Fields of headers the opcode does not carry are zero.
func (p *Packet) Headers() Headers {
	var h Headers
	if p.BTH == nil {
		return h
	}
	h.BTH = p.BTH.Fields()
	if p.DETH != nil {
		h.DETH = p.DETH.Fields()
	}
	if p.FETH != nil {
		h.FETH = p.FETH.Fields()
	}
	if p.RETH != nil {
		h.RETH = p.RETH.Fields()
	}
	if p.AtomicETH != nil {
		h.AtomicETH = p.AtomicETH.Fields()
	}
	if p.AETH != nil {
		h.AETH = p.AETH.Fields()
	}
	if p.AtomicAckETH != nil {
		h.AtomicAckETH = p.AtomicAckETH.Fields()
	}
	if p.ImmDt != nil {
		h.ImmDt = p.ImmDt.Fields()
	}
	if p.IETH != nil {
		h.IETH = p.IETH.Fields()
	}
	return h
}
