package oob

import "fmt"

// PingpongDest is what the rdma-core pingpong examples (ibv_rc_pingpong,
// ibv_uc_pingpong, ibv_ud_pingpong) tell each other about their QP.
type PingpongDest struct {
	// LID is the port's LID; 0 on RoCE.
	LID uint16
	// QPN and PSN are 24-bit: the QP number and the first PSN it sends.
	QPN uint32
	PSN uint32
	// GID is the port GID in network byte order; all zero when the
	// example runs without -g (InfiniBand).
	GID [16]byte
}

// PingpongMsgSize is the size of the pingpong message, NUL included:
// sizeof "0000:000000:000000:00000000000000000000000000000000".
const PingpongMsgSize = 52

// AppendPingpongDest appends d as the pingpong examples write it:
// "%04x:%06x:%06x:%s" and the NUL, 52 bytes, where the GID is 32 hex digits
// in network byte order. (The examples' gid_to_wire_gid prints the GID as
// four %08x of htobe32 of 32-bit words loaded in host order, which on any
// host is the 16 bytes in order.) QPN and PSN are cut to their 24 bits.
func AppendPingpongDest(b []byte, d PingpongDest) []byte {
	b = appendHex(b, uint64(d.LID), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.QPN), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.PSN), 6)
	b = append(b, ':')
	for _, g := range d.GID {
		b = appendHex(b, uint64(g), 2)
	}
	return append(b, 0)
}

// ParsePingpongDest parses a 52-byte pingpong message: exactly 4, 6, 6 and
// 32 hex digits (either case) separated by colons, then the NUL. The
// examples parse with sscanf("%x:%x:%x:%s") and would take more; this parser
// accepts what they write and names the wrong field otherwise.
func ParsePingpongDest(msg []byte) (PingpongDest, error) {
	var d PingpongDest
	if len(msg) != PingpongMsgSize {
		return d, fmt.Errorf("%w: pingpong message of %d bytes, want %d: %s", ErrMalformed, len(msg), PingpongMsgSize, quoteBytes(msg))
	}
	if msg[PingpongMsgSize-1] != 0 {
		return d, fmt.Errorf("%w: pingpong message not NUL-terminated: %s", ErrMalformed, quoteBytes(msg))
	}
	const (
		lidEnd = 4
		qpnEnd = lidEnd + 1 + 6
		psnEnd = qpnEnd + 1 + 6
		gidOff = psnEnd + 1
	)
	for _, sep := range [...]int{lidEnd, qpnEnd, psnEnd} {
		if msg[sep] != ':' {
			return d, fmt.Errorf("%w: pingpong message: want ':' at byte %d: %s", ErrMalformed, sep, quoteBytes(msg))
		}
	}
	lid, ok := parseHex(msg[:lidEnd])
	if !ok {
		return d, pingpongFieldError("LID", msg[:lidEnd])
	}
	qpn, ok := parseHex(msg[lidEnd+1 : qpnEnd])
	if !ok {
		return d, pingpongFieldError("QPN", msg[lidEnd+1:qpnEnd])
	}
	psn, ok := parseHex(msg[qpnEnd+1 : psnEnd])
	if !ok {
		return d, pingpongFieldError("PSN", msg[qpnEnd+1:psnEnd])
	}
	for i := range d.GID {
		g, ok := parseHex(msg[gidOff+2*i : gidOff+2*i+2])
		if !ok {
			return PingpongDest{}, pingpongFieldError("GID", msg[gidOff:PingpongMsgSize-1])
		}
		d.GID[i] = byte(g)
	}
	d.LID, d.QPN, d.PSN = uint16(lid), uint32(qpn), uint32(psn)
	return d, nil
}

func pingpongFieldError(name string, field []byte) error {
	return fmt.Errorf("%w: pingpong message: %s %s is not %d hex digits", ErrMalformed, name, quoteBytes(field), len(field))
}

func (d PingpongDest) check() error {
	if d.QPN > 0xffffff {
		return fmt.Errorf("oob: QPN %#x does not fit 24 bits", d.QPN)
	}
	if d.PSN > 0xffffff {
		return fmt.Errorf("oob: PSN %#x does not fit 24 bits", d.PSN)
	}
	return nil
}
