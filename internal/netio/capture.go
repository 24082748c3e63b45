package netio

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/internal/pcap"
	"github.com/goroce/goroce/internal/wire"
)

// The capture tap writes every RoCEv2 packet a Conn sends or accepts to a
// pcap file of raw IP packets (LINKTYPE_RAW), the IP and UDP headers rebuilt
// as they were on the wire as far as a UDP socket can know them:
//
//   - sent packets: IPv4 identification 0 and DF (what the kernel sends from
//     our unconnected DF sockets), TTL or hop limit 64, DSCP/ECN 0, correct
//     IP and UDP checksums (the kernel computes the UDP checksum);
//   - received packets: the identification recovered from the ICRC (0 for
//     goroce peers), DF; TTL, hop limit and DSCP/ECN are not reported by the
//     socket and written as 64 and 0; the UDP checksum of IPv4 packets is
//     written as 0 ("none", what rxe sends), that of IPv6 packets computed.
//
// Every packet in the file therefore carries a valid ICRC over its headers,
// which tshark and rxe-vm/icrc_check.py can verify. Dropped packets
// (malformed, bad ICRC) are not captured.

// captureTap serialises writes to one pcap file; its buffer holds the
// record being written, so capturing does not allocate.
type captureTap struct {
	mu  sync.Mutex
	w   *pcap.Writer // nil once the tap is replaced or the Conn closed
	buf []byte
}

// SetCapture starts writing every packet sent or accepted to w as a pcap
// file with nanosecond timestamps, replacing any previous capture; nil
// stops capturing. The file header is written at once. w is written from
// the sending and receiving goroutines under a lock; wrap a file in a
// bufio.Writer and flush it after SetCapture(nil) or Close. After
// SetCapture returns, no packet is written to the previous writer. Capture
// write errors do not affect traffic; they are counted in
// Counters.CaptureErrors.
func (c *Conn) SetCapture(w io.Writer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return net.ErrClosed
	}
	var t *captureTap
	if w != nil {
		pw, err := pcap.NewNanosecondWriter(w, pcap.LinkTypeRaw, 0)
		if err != nil {
			return err
		}
		t = &captureTap{w: pw, buf: make([]byte, 0, wire.MaxIPUDPHeaderLen+c.cfg.MaxDatagramSize)}
	}
	if old := c.tap.Swap(t); old != nil {
		old.stop()
	}
	return nil
}

// stop makes the tap drop all later packets, waiting for a write in
// progress.
func (t *captureTap) stop() {
	t.mu.Lock()
	t.w = nil
	t.mu.Unlock()
}

// record writes one packet: udpPayload (BTH through ICRC) from src to dst
// with IPv4 identification id. udpChecksum says whether to compute the
// IPv4 UDP checksum (IPv6 always gets one, as it must).
func (t *captureTap) record(ctr *Counters, src, dst netip.AddrPort, id uint16, udpPayload []byte, udpChecksum bool) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.w == nil {
		return
	}
	var hdrs [wire.MaxIPUDPHeaderLen]byte
	ip, udp := wire.IPUDPHeaders(&hdrs, src, dst, id, len(udpPayload))
	v4 := len(ip) == wire.IPv4MinHeaderLen
	if v4 {
		wire.IPv4(ip).SetChecksum(wire.IPv4(ip).ComputeChecksum())
	}
	if !v4 || udpChecksum {
		wire.UDP(udp).SetChecksum(udpChecksumOf(ip, udp, udpPayload))
	}
	b := append(t.buf[:0], ip...)
	b = append(b, udp...)
	b = append(b, udpPayload...)
	t.buf = b
	if err := t.w.WritePacket(now, b); err != nil {
		ctr.CaptureErrors.Add(1)
	}
}

// udpChecksumOf computes the UDP checksum (RFC 768, RFC 8200 8.1) of a
// datagram with the given IP and UDP headers (checksum field 0) and payload.
func udpChecksumOf(ip, udp, payload []byte) uint16 {
	var sum uint64
	// Pseudo-header: addresses, protocol, UDP length.
	if len(ip) == wire.IPv4MinHeaderLen {
		sum = onesSum(sum, ip[12:20])
	} else {
		sum = onesSum(sum, ip[8:40])
	}
	sum += wire.IPProtocolUDP
	sum += uint64(binary.BigEndian.Uint16(udp[4:6]))
	sum = onesSum(sum, udp)
	sum = onesSum(sum, payload)
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	cs := ^uint16(sum)
	if cs == 0 {
		cs = 0xFFFF // 0 means "no checksum"; the computed 0 is sent as all ones
	}
	return cs
}

// onesSum adds b as big-endian 16-bit words (the last odd byte padded with
// zero) to sum, folding later.
func onesSum(sum uint64, b []byte) uint64 {
	for len(b) >= 2 {
		sum += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint64(b[0]) << 8
	}
	return sum
}
