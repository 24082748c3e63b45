package main

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/goroce/goroce/internal/pcap"
	"github.com/goroce/goroce/internal/wire"
)

// kind says what a capture record turned out to be.
type kind int

const (
	kindRoCE     kind = iota // a RoCEv2 packet, well-formed or not
	kindOther                // not RoCEv2: skipped
	kindFiltered             // RoCEv2, but not to a QPN of --qpn
)

// roceFrame is one RoCEv2 packet of a capture, decoded as far as it goes.
type roceFrame struct {
	index int           // frame number in the file, from 1 as in tshark
	rel   time.Duration // time since the file's first frame
	nano  bool          // the file has nanosecond timestamps
	rec   pcap.Record

	frame    pcap.Frame
	frameErr error // the link, IP or UDP layer could not be decoded

	pkt      wire.Packet
	parseErr error // wire.Packet.Parse failed

	hasICRC  bool // the packet is long enough to carry an ICRC
	icrcGot  uint32
	icrcWant uint32
}

func (p *roceFrame) malformed() bool { return p.frameErr != nil || p.parseErr != nil }

func (p *roceFrame) icrcBad() bool { return p.hasICRC && p.icrcGot != p.icrcWant }

// decoder turns capture records into roceFrames. It reuses one roceFrame:
// the result of decode is valid until the next call.
type decoder struct {
	opt      *options
	linkType pcap.LinkType
	nano     bool
	cur      roceFrame
}

func (d *decoder) decode(index int, rel time.Duration, rec pcap.Record) (*roceFrame, kind) {
	p := &d.cur
	*p = roceFrame{index: index, rel: rel, nano: d.nano, rec: rec}
	f, err := pcap.DecodeFrame(d.linkType, rec.Data)
	p.frame = f
	if err != nil {
		if errors.Is(err, pcap.ErrNotIP) || errors.Is(err, pcap.ErrNotUDP) || errors.Is(err, pcap.ErrFragment) {
			return nil, kindOther
		}
		// A UDP datagram broken below the transport (cut by the snapshot
		// length, inconsistent lengths) is reported when it may be
		// RoCEv2: its destination port is ours or was not captured.
		if f.Protocol != pcap.ProtocolUDP || (f.DstPort != 0 && f.DstPort != d.opt.port) {
			return nil, kindOther
		}
		if len(d.opt.qpns) > 0 {
			return nil, kindFiltered // its QPN is unknown
		}
		p.frameErr = err
		return p, kindRoCE
	}
	if f.DstPort != d.opt.port {
		return nil, kindOther
	}
	b := f.UDPPayload
	if len(d.opt.qpns) > 0 && (len(b) < wire.BTHLen || !d.opt.wantQPN(wire.BTH(b).DestQP())) {
		return nil, kindFiltered
	}
	p.parseErr = p.pkt.Parse(b, d.opt.mtu)
	if p.parseErr == nil {
		// A CM message whose fields break IBA's rules is as malformed as
		// a bad header: --check counts it.
		if _, isCM, err := cmOf(&p.pkt); isCM && err != nil {
			p.parseErr = err
		}
	}
	// The ICRC is checked even when parsing fails: telling corruption from
	// a packet the parser rejects is half of debugging it.
	if n := len(b) - wire.ICRCLen; n >= wire.BTHLen {
		p.icrcWant = wire.ICRC(f.IPHeader, f.UDPHeader, b[:n])
		p.icrcGot = binary.LittleEndian.Uint32(b[n:])
		p.hasICRC = true
	}
	return p, kindRoCE
}
