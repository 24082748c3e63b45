package verbs

import (
	"encoding/binary"
	"net/netip"
	"sync/atomic"
)

// AddressVector is the path to a remote port (struct ibv_ah_attr with its
// struct ibv_global_route flattened): used by ModifyQP's ah_attr for RC and
// UC QPs and by address handles for UD sends. On RoCE every packet carries a
// GRH (an IP header), so IsGlobal must be true and DGID is the remote GID;
// LID fields have no meaning.
type AddressVector struct {
	DGID         GID    // remote GID
	FlowLabel    uint32 // IPv6 flow label (20 bits)
	SGIDIndex    int    // local GID table index; selects the source address
	HopLimit     uint8  // IP TTL / hop limit
	TrafficClass uint8  // IP DSCP and ECN byte
	SL           uint8  // service level (4 bits)
	StaticRate   uint8  // enum ibv_rate; 0 = port rate
	IsGlobal     bool   // GRH present; required on RoCE
	PortNum      int    // local port; must be 1
	DLID         uint16 // ignored on RoCE
	SrcPathBits  uint8  // ignored on RoCE

	// UDPPort is the remote device's UDP port; 0 means 4791, the RoCEv2
	// port every RoCE peer uses. Only goroce peers can use another.
	UDPPort uint16
}

// checkAV validates an address vector against the device (rxe_av_chk_attr
// and the RoCE rules of the kernel core): port 1, a GRH, a populated source
// GID, a destination GID of the same family as the source (rxe picks IPv4 or
// IPv6 from the GIDs), and field widths.
func (d *Device) checkAV(op, field string, av *AddressVector) error {
	if err := d.checkPort(op, field+".port_num", av.PortNum); err != nil {
		return err
	}
	if !av.IsGlobal {
		return newError(op, field+".is_global", ErrInvalidArgument, "RoCE requires a GRH")
	}
	sgid, ok := d.sgid(av.SGIDIndex)
	if !ok {
		return errorf(op, field+".sgid_index", ErrInvalidArgument, "%d is not a populated GID index", av.SGIDIndex)
	}
	switch {
	case av.DGID.IsZero():
		return newError(op, field+".dgid", ErrInvalidArgument, "zero GID")
	case av.DGID.isIPv4Mapped() != sgid.isIPv4Mapped():
		return errorf(op, field+".dgid", ErrInvalidArgument, "%v and source GID %v are of different IP families", av.DGID, sgid)
	case av.FlowLabel > 0xFFFFF:
		return errorf(op, field+".flow_label", ErrInvalidArgument, "%#x exceeds 20 bits", av.FlowLabel)
	case av.SL > 15:
		return errorf(op, field+".sl", ErrInvalidArgument, "%d exceeds 4 bits", av.SL)
	}
	return nil
}

// AH is an address handle (struct ibv_ah): a validated address vector that
// UD send work requests name as their destination.
type AH struct {
	pd     *PD
	av     AddressVector
	dst    netip.AddrPort // the remote device: DGID's address, UDPPort
	closed atomic.Bool    // read lock-free by PostSend

	hw hwAH // the hardware backend's; nil on a goroce device
}

// CreateAH creates an address handle (ibv_create_ah).
func (pd *PD) CreateAH(av AddressVector) (*AH, error) {
	const op = "CreateAH"
	if pd == nil {
		return nil, newError(op, "pd", ErrInvalidArgument, "nil")
	}
	d := pd.dev
	if err := d.checkAV(op, "ah_attr", &av); err != nil {
		return nil, err
	}
	if pd.hw != nil {
		return pd.hw.createAH(pd, &av)
	}
	if err := pd.use(op); err != nil {
		return nil, err
	}
	if err := d.res.ah.acquire(op); err != nil {
		pd.unuse()
		return nil, err
	}
	port := av.UDPPort
	if port == 0 {
		port = DefaultUDPPort
	}
	ah := &AH{pd: pd, av: av, dst: netip.AddrPortFrom(av.DGID.Addr(), port)}
	if err := d.register(op, func() { d.ahs[ah] = struct{}{} }); err != nil {
		d.res.ah.release()
		pd.unuse()
		return nil, err
	}
	return ah, nil
}

// Attr returns the address vector.
func (ah *AH) Attr() AddressVector { return ah.av }

// PD returns the address handle's protection domain.
func (ah *AH) PD() *PD { return ah.pd }

// Destroy destroys the address handle (ibv_destroy_ah). Work requests
// already posted with it keep their copy of the address vector.
func (ah *AH) Destroy() error {
	const op = "DestroyAH"
	if ah.hw != nil {
		return ah.hw.destroy(ah)
	}
	if !ah.closed.CompareAndSwap(false, true) {
		return closedError(op, "ah")
	}
	d := ah.pd.dev
	d.unregister(func() { delete(d.ahs, ah) })
	d.res.ah.release()
	ah.pd.unuse()
	return nil
}

// GRHSize is the size of the Global Route Header area at the start of every
// UD receive buffer (sizeof(struct ibv_grh)): a UD receive places the
// packet's IP header there and the payload after it, and its completion's
// ByteLen counts these 40 bytes. On RoCEv2 an IPv4 packet's 20-byte header
// fills bytes 20 to 39 after 20 zero bytes; an IPv6 packet's header fills
// all 40, as Linux rxe writes them.
const GRHSize = 40

// InitAHFromWC returns the address vector that answers the sender of a UD
// receive completion (ibv_init_ah_from_wc): the source address of the IP
// header in grh, the first GRHSize bytes of the receive buffer, becomes
// the destination GID, and the local GID the packet was sent to selects
// the source GID index. The hop limit and traffic class are those of the
// received header. wc must have WCGRH set.
func (d *Device) InitAHFromWC(port int, wc *WorkCompletion, grh []byte) (AddressVector, error) {
	const op = "InitAHFromWC"
	if err := d.checkPort(op, "port_num", port); err != nil {
		return AddressVector{}, err
	}
	switch {
	case wc == nil:
		return AddressVector{}, newError(op, "wc", ErrInvalidArgument, "nil")
	case wc.WCFlags&WCGRH == 0:
		return AddressVector{}, newError(op, "wc.wc_flags", ErrInvalidArgument, "no GRH: not a UD receive")
	case len(grh) < GRHSize:
		return AddressVector{}, errorf(op, "grh", ErrInvalidArgument, "%d bytes, want %d", len(grh), GRHSize)
	}
	av := AddressVector{IsGlobal: true, PortNum: port, FlowLabel: binary.BigEndian.Uint32(grh) & 0xFFFFF}
	var local GID
	if ip4 := grh[20:40]; grh[0]>>4 != 6 && ip4[0] == 0x45 {
		// An IPv4 header after 20 zero bytes (libibverbs tells the
		// forms apart by the version nibbles and the header checksum).
		av.DGID = GIDFromAddr(netip.AddrFrom4([4]byte(ip4[12:16])))
		local = GIDFromAddr(netip.AddrFrom4([4]byte(ip4[16:20])))
		av.HopLimit, av.TrafficClass = ip4[8], ip4[1]
		av.FlowLabel = 0
	} else if grh[0]>>4 == 6 {
		av.DGID, local = GID(grh[8:24]), GID(grh[24:40])
		av.HopLimit = grh[7]
		av.TrafficClass = uint8(binary.BigEndian.Uint32(grh) >> 20)
	} else {
		return AddressVector{}, newError(op, "grh", ErrInvalidArgument, "neither an IPv4 nor an IPv6 header")
	}
	for i, e := range d.gids {
		if e.GID == local && !local.IsZero() {
			av.SGIDIndex = i
			return av, nil
		}
	}
	return AddressVector{}, errorf(op, "grh", ErrInvalidArgument, "destination %v is not a GID of the device", local)
}

// CreateAHFromWC creates an address handle to the sender of a UD receive
// completion (ibv_create_ah_from_wc): InitAHFromWC, then CreateAH. The port
// comes first, as in every verb that takes one (libibverbs puts it last
// here).
func (pd *PD) CreateAHFromWC(port int, wc *WorkCompletion, grh []byte) (*AH, error) {
	if pd == nil {
		return nil, newError("CreateAHFromWC", "pd", ErrInvalidArgument, "nil")
	}
	av, err := pd.dev.InitAHFromWC(port, wc, grh)
	if err != nil {
		return nil, err
	}
	return pd.CreateAH(av)
}
