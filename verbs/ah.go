package verbs

import "sync/atomic"

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
	closed atomic.Bool // read lock-free by PostSend
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
	if err := pd.use(op); err != nil {
		return nil, err
	}
	if err := d.res.ah.acquire(op); err != nil {
		pd.unuse()
		return nil, err
	}
	ah := &AH{pd: pd, av: av}
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
	if !ah.closed.CompareAndSwap(false, true) {
		return closedError(op, "ah")
	}
	d := ah.pd.dev
	d.unregister(func() { delete(d.ahs, ah) })
	d.res.ah.release()
	ah.pd.unuse()
	return nil
}
