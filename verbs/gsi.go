package verbs

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/internal/gsi"
	"github.com/goroce/goroce/internal/netio"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// QP 1, the general services interface (GSI), carries the management
// datagrams of the IB communication manager: 256-byte MADs in UD SEND
// Only packets from QP 1 to QP 1 with the GSI Q_Key. Every device has one,
// outside the QP table, so the data path's dispatch is untouched: only a
// packet for no QP is checked for QP 1 (engine_recv.go). The port is
// handed to package cm through internal/gsi, not through the public API.

// gsiPort is a device's QP 1 (gsi.Port).
type gsiPort struct {
	dev    *Device
	sender *netio.Sender // from the device's constant QP 1 source port

	receiver atomic.Pointer[gsiReceiver]

	mu  sync.Mutex // guards psn and buf, the send path's
	psn psn.PSN
	buf []byte

	rcvd, sent, dropped atomic.Uint64
}

// gsiReceiver boxes a gsi.Receiver for the atomic pointer.
type gsiReceiver struct{ r gsi.Receiver }

// gsiPacketLen is the length of a GSI packet from the BTH through the
// payload.
const gsiPacketLen = wire.BTHLen + wire.DETHLen + gsi.MADSize

// openGSI gives d its QP 1. Its packets leave from the source port rxe
// gives its own QP 1, 0xC000 + hash_32(1, 14): constant per device.
func openGSI(d *Device) (*gsiPort, error) {
	s, err := d.eng.conn.Sender(netio.SourcePortForQPN(wire.GSIQPN))
	if err != nil {
		return nil, err
	}
	return &gsiPort{dev: d, sender: s, buf: make([]byte, 0, gsiPacketLen+wire.ICRCLen)}, nil
}

// close detaches the receiver and gives the source port back.
func (g *gsiPort) close() {
	g.receiver.Store(nil)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sender != nil {
		g.sender.Release()
		g.sender = nil
	}
}

func (g *gsiPort) Addr() netip.Addr { return g.dev.addr }
func (g *gsiPort) UDPPort() uint16  { return g.dev.udpPort }
func (g *gsiPort) NodeGUID() uint64 { return uint64(g.dev.attr.NodeGUID) }
func (g *gsiPort) Device() any      { return g.dev }

// SetReceiver attaches r (nil detaches).
func (g *gsiPort) SetReceiver(r gsi.Receiver) {
	if r == nil {
		g.receiver.Store(nil)
		return
	}
	g.receiver.Store(&gsiReceiver{r})
}

// errGSIClosed is Send's error after the device closed.
var errGSIClosed = errors.New("QP 1 of a closed device")

// Send sends a MAD to QP 1 at to: BTH (UD SEND Only, P_Key 0xFFFF, AckReq
// as rxe sets it, a PSN counting the port's packets) and DETH (GSI Q_Key,
// source QP 1), then the MAD; netio appends the ICRC.
func (g *gsiPort) Send(to netip.AddrPort, mad []byte) error {
	if len(mad) != gsi.MADSize {
		return errors.New("verbs: a MAD is 256 bytes")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sender == nil {
		return errGSIClosed
	}
	h := wire.Headers{
		BTH:  wire.BTHFields{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: wire.GSIQPN, AckReq: true, PSN: g.psn},
		DETH: wire.DETHFields{QKey: wire.GSIQKey, SrcQP: wire.GSIQPN},
	}
	g.psn = g.psn.Add(1)
	b := wire.AppendHeaders(g.buf[:0], &h)
	b = append(b, mad...)
	if err := g.sender.Send(to, b); err != nil {
		return err
	}
	g.sent.Add(1)
	return nil
}

// GSI receive errors, for checkGSI.
var (
	errGSIOpcode = errors.New("not a UD SEND Only")
	errGSIQKey   = errors.New("not the GSI Q_Key")
	errGSISrcQP  = errors.New("not from QP 1")
	errGSIPKey   = errors.New("not the default P_Key")
	errGSILength = errors.New("not a 256-byte MAD")
)

// checkGSI checks a packet addressed to QP 1 (parsed, ICRC good) as QP 1
// takes it and returns its MAD.
func checkGSI(p *wire.Packet) ([]byte, error) {
	switch {
	case p.BTH.Opcode() != wire.UDSendOnly:
		return nil, errGSIOpcode
	case p.DETH.QKey() != wire.GSIQKey:
		return nil, errGSIQKey
	case p.DETH.SrcQP() != wire.GSIQPN:
		return nil, errGSISrcQP
	case p.BTH.PKey() != wire.DefaultPKey:
		return nil, errGSIPKey
	case len(p.Payload) != gsi.MADSize:
		return nil, errGSILength
	}
	return p.Payload, nil
}

// receive hands a packet for QP 1 to the receiver, on the receive path;
// a malformed one, or one that finds no receiver, is counted and dropped.
func (g *gsiPort) receive(p *wire.Packet, from netip.AddrPort, local netip.Addr) {
	mad, err := checkGSI(p)
	r := g.receiver.Load()
	if err != nil || r == nil {
		g.dropped.Add(1)
		return
	}
	if !local.IsValid() {
		local = g.dev.addr
	}
	g.rcvd.Add(1)
	r.r.ReceiveMAD(netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), local.Unmap(), mad)
}

// firstPacket handles the first packet from its peer of a connected QP
// (since its last move to RTR with an address vector): in RTR it raises
// EventCommEst (IBA 11.6.3, communication established); in RTR or RTS it
// tells the CM, for which a passive connection whose RTU was lost is
// established by its first packet (rdma_cm moves the passive QP to RTS
// before the REP, so the packet often finds it there). The caller holds
// qp.xmu.
func (e *engine) firstPacket(qp *QP) {
	qp.commEst = true
	if qp.State() == QPStateRTR {
		qp.dev.events().post(AsyncEvent{Type: EventCommEst, QP: qp})
	}
	if g := qp.dev.gsi.Load(); g != nil {
		if r := g.receiver.Load(); r != nil {
			r.r.CommEstablished(qp.qpn)
		}
	}
}
