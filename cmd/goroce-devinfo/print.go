package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/goroce/goroce/verbs"
)

// The layout below is ibv_devinfo's (rdma-core libibverbs/examples/devinfo.c):
// field names, tab runs and number formats are kept exactly, so output can be
// compared line by line with a kernel device's. Where ibv_devinfo prints an
// attribute a goroce device does not have (end-to-end contexts, multicast,
// on-demand paging, TSO, RSS, packet pacing, tag matching, fast memory
// regions), it prints what a kernel device without the feature reports.

// transportIB is IBV_TRANSPORT_IB: RoCE devices report the InfiniBand
// transport (the link layer tells Ethernet apart).
const transportIB = 0

// printDevice writes the device and its ports (only port ibPort if not 0).
func printDevice(w io.Writer, dev *verbs.Device, ibPort int, verbose bool) error {
	a := dev.Query()
	fmt.Fprintf(w, "hca_id:\t%s\n", dev.Name())
	fmt.Fprintf(w, "\ttransport:\t\t\t%s (%d)\n", "InfiniBand", transportIB)
	if a.FWVer != "" {
		fmt.Fprintf(w, "\tfw_ver:\t\t\t\t%s\n", a.FWVer)
	}
	fmt.Fprintf(w, "\tnode_guid:\t\t\t%v\n", a.NodeGUID)
	fmt.Fprintf(w, "\tsys_image_guid:\t\t\t%v\n", a.SysImageGUID)
	fmt.Fprintf(w, "\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	fmt.Fprintf(w, "\tvendor_part_id:\t\t\t%d\n", a.VendorPartID)
	fmt.Fprintf(w, "\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	fmt.Fprintf(w, "\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)
	if verbose {
		printLimits(w, &a, dev.NumCompVectors())
	}
	for port := 1; port <= a.PhysPortCnt; port++ {
		if ibPort != 0 && port != ibPort {
			continue
		}
		pa, err := dev.QueryPort(port)
		if err != nil {
			return fmt.Errorf("query port %d: %w", port, err)
		}
		printPort(w, port, &pa, verbose)
		if verbose {
			printGIDs(w, dev.GIDTable(), pa.LinkLayer)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// printLimits writes the -v part of the device attributes.
func printLimits(w io.Writer, a *verbs.DeviceAttr, numCompVectors int) {
	fmt.Fprintf(w, "\tmax_mr_size:\t\t\t0x%x\n", a.MaxMRSize)
	fmt.Fprintf(w, "\tpage_size_cap:\t\t\t0x%x\n", a.PageSizeCap)
	fmt.Fprintf(w, "\tmax_qp:\t\t\t\t%d\n", a.MaxQP)
	fmt.Fprintf(w, "\tmax_qp_wr:\t\t\t%d\n", a.MaxQPWR)
	// device_cap_flags is the 32-bit field of struct ibv_device_attr; the
	// bits above it only appear in device_cap_flags_ex.
	fmt.Fprintf(w, "\tdevice_cap_flags:\t\t0x%08x\n", uint32(a.DeviceCapFlags))
	printFlags(w, uint64(uint32(a.DeviceCapFlags)), deviceCapNames)
	fmt.Fprintf(w, "\tmax_sge:\t\t\t%d\n", a.MaxSGE)
	fmt.Fprintf(w, "\tmax_sge_rd:\t\t\t%d\n", a.MaxSGERD)
	fmt.Fprintf(w, "\tmax_cq:\t\t\t\t%d\n", a.MaxCQ)
	fmt.Fprintf(w, "\tmax_cqe:\t\t\t%d\n", a.MaxCQE)
	fmt.Fprintf(w, "\tmax_mr:\t\t\t\t%d\n", a.MaxMR)
	fmt.Fprintf(w, "\tmax_pd:\t\t\t\t%d\n", a.MaxPD)
	fmt.Fprintf(w, "\tmax_qp_rd_atom:\t\t\t%d\n", a.MaxQPRdAtom)
	fmt.Fprintf(w, "\tmax_ee_rd_atom:\t\t\t%d\n", 0)
	fmt.Fprintf(w, "\tmax_res_rd_atom:\t\t%d\n", a.MaxResRdAtom)
	fmt.Fprintf(w, "\tmax_qp_init_rd_atom:\t\t%d\n", a.MaxQPInitRdAtom)
	fmt.Fprintf(w, "\tmax_ee_init_rd_atom:\t\t%d\n", 0)
	fmt.Fprintf(w, "\tatomic_cap:\t\t\t%s (%d)\n", atomicCapStr(a.AtomicCap), int(a.AtomicCap))
	fmt.Fprintf(w, "\tmax_ee:\t\t\t\t%d\n", 0)
	fmt.Fprintf(w, "\tmax_rdd:\t\t\t%d\n", 0)
	fmt.Fprintf(w, "\tmax_mw:\t\t\t\t%d\n", a.MaxMW)
	fmt.Fprintf(w, "\tmax_raw_ipv6_qp:\t\t%d\n", 0)
	fmt.Fprintf(w, "\tmax_raw_ethy_qp:\t\t%d\n", 0)
	fmt.Fprintf(w, "\tmax_mcast_grp:\t\t\t%d\n", 0)
	fmt.Fprintf(w, "\tmax_mcast_qp_attach:\t\t%d\n", 0)
	fmt.Fprintf(w, "\tmax_total_mcast_qp_attach:\t%d\n", 0)
	fmt.Fprintf(w, "\tmax_ah:\t\t\t\t%d\n", a.MaxAH)
	fmt.Fprintf(w, "\tmax_fmr:\t\t\t%d\n", 0)
	fmt.Fprintf(w, "\tmax_srq:\t\t\t%d\n", a.MaxSRQ)
	if a.MaxSRQ != 0 {
		fmt.Fprintf(w, "\tmax_srq_wr:\t\t\t%d\n", a.MaxSRQWR)
		fmt.Fprintf(w, "\tmax_srq_sge:\t\t\t%d\n", a.MaxSRQSGE)
	}
	fmt.Fprintf(w, "\tmax_pkeys:\t\t\t%d\n", a.MaxPKeys)
	fmt.Fprintf(w, "\tlocal_ca_ack_delay:\t\t%d\n", a.LocalCAAckDelay)

	// No on-demand paging on any transport.
	fmt.Fprintf(w, "\tgeneral_odp_caps:\n")
	for _, t := range []string{"rc", "uc", "ud", "xrc"} {
		fmt.Fprintf(w, "\t%s_odp_caps:\n\t\t\t\t\tNO SUPPORT\n", t)
	}
	fmt.Fprintf(w, "\tcompletion_timestamp_mask not supported\n")
	fmt.Fprintf(w, "\tcore clock not supported\n")

	fmt.Fprintf(w, "\tdevice_cap_flags_ex:\t\t0x%X\n", uint64(a.DeviceCapFlags))
	printFlags(w, uint64(a.DeviceCapFlags)&^0xffffffff, deviceCapExNames)

	fmt.Fprintf(w, "\ttso_caps:\n\t\tmax_tso:\t\t\t%d\n", 0)
	fmt.Fprintf(w, "\trss_caps:\n")
	fmt.Fprintf(w, "\t\tmax_rwq_indirection_tables:\t\t\t%d\n", 0)
	fmt.Fprintf(w, "\t\tmax_rwq_indirection_table_size:\t\t\t%d\n", 0)
	fmt.Fprintf(w, "\t\trx_hash_function:\t\t\t\t0x%x\n", 0)
	fmt.Fprintf(w, "\t\trx_hash_fields_mask:\t\t\t\t0x%X\n", 0)
	fmt.Fprintf(w, "\tmax_wq_type_rq:\t\t\t%d\n", 0)
	fmt.Fprintf(w, "\tpacket_pacing_caps:\n")
	fmt.Fprintf(w, "\t\tqp_rate_limit_min:\t%dkbps\n", 0)
	fmt.Fprintf(w, "\t\tqp_rate_limit_max:\t%dkbps\n", 0)
	fmt.Fprintf(w, "\ttag matching not supported\n")
	fmt.Fprintf(w, "\tnum_comp_vectors:\t\t%d\n", numCompVectors)
}

// printPort writes one port's attributes.
func printPort(w io.Writer, port int, p *verbs.PortAttr, verbose bool) {
	fmt.Fprintf(w, "\t\tport:\t%d\n", port)
	fmt.Fprintf(w, "\t\t\tstate:\t\t\t%s (%d)\n", portStateStr(p.State), int(p.State))
	fmt.Fprintf(w, "\t\t\tmax_mtu:\t\t%s (%d)\n", mtuStr(p.MaxMTU), int(p.MaxMTU))
	fmt.Fprintf(w, "\t\t\tactive_mtu:\t\t%s (%d)\n", mtuStr(p.ActiveMTU), int(p.ActiveMTU))
	fmt.Fprintf(w, "\t\t\tsm_lid:\t\t\t%d\n", p.SMLID)
	fmt.Fprintf(w, "\t\t\tport_lid:\t\t%d\n", p.LID)
	fmt.Fprintf(w, "\t\t\tport_lmc:\t\t0x%02x\n", p.LMC)
	fmt.Fprintf(w, "\t\t\tlink_layer:\t\t%s\n", linkLayerStr(p.LinkLayer))
	if !verbose {
		return
	}
	fmt.Fprintf(w, "\t\t\tmax_msg_sz:\t\t0x%x\n", p.MaxMsgSize)
	fmt.Fprintf(w, "\t\t\tport_cap_flags:\t\t0x%08x\n", uint32(p.PortCapFlags))
	fmt.Fprintf(w, "\t\t\tport_cap_flags2:\t0x%04x\n", 0)
	fmt.Fprintf(w, "\t\t\tmax_vl_num:\t\t%s (%d)\n", vlStr(p.MaxVLNum), p.MaxVLNum)
	fmt.Fprintf(w, "\t\t\tbad_pkey_cntr:\t\t0x%x\n", p.BadPKeyCntr)
	fmt.Fprintf(w, "\t\t\tqkey_viol_cntr:\t\t0x%x\n", p.QKeyViolCntr)
	fmt.Fprintf(w, "\t\t\tsm_sl:\t\t\t%d\n", p.SMSL)
	fmt.Fprintf(w, "\t\t\tpkey_tbl_len:\t\t%d\n", p.PKeyTblLen)
	fmt.Fprintf(w, "\t\t\tgid_tbl_len:\t\t%d\n", p.GIDTblLen)
	fmt.Fprintf(w, "\t\t\tsubnet_timeout:\t\t%d\n", p.SubnetTimeout)
	fmt.Fprintf(w, "\t\t\tinit_type_reply:\t%d\n", p.InitTypeReply)
	fmt.Fprintf(w, "\t\t\tactive_width:\t\t%sX (%d)\n", widthStr(p.ActiveWidth), p.ActiveWidth)
	fmt.Fprintf(w, "\t\t\tactive_speed:\t\t%s (%d)\n", speedStr(p.ActiveSpeed), p.ActiveSpeed)
	// ibv_devinfo prints the physical state for the InfiniBand transport,
	// which RoCE devices report.
	fmt.Fprintf(w, "\t\t\tphys_state:\t\t%s (%d)\n", physStateStr(p.PhysState), p.PhysState)
}

// printGIDs writes the GID table entries that are in use; like ibv_devinfo
// it skips entries whose interface identifier (the low 64 bits) is zero.
func printGIDs(w io.Writer, gids []verbs.GIDEntry, ll verbs.LinkLayer) {
	for _, e := range gids {
		if [8]byte(e.GID[8:]) == [8]byte{} {
			continue
		}
		suffix := ""
		if ll == verbs.LinkLayerEthernet {
			suffix = ", " + gidTypeStr(e.Type)
		}
		switch e.Type {
		case verbs.GIDTypeRoCEv2:
			fmt.Fprintf(w, "\t\t\tGID[%3d]:\t\t%v%s\n", e.Index, e.GID, suffix)
		case verbs.GIDTypeIB, verbs.GIDTypeRoCEv1:
			// The raw 16 bytes in groups of two, as ibv_devinfo prints
			// GIDs of these types.
			fmt.Fprintf(w, "\t\t\tGID[%3d]:\t\t", e.Index)
			for i := 0; i < 16; i += 2 {
				if i > 0 {
					fmt.Fprint(w, ":")
				}
				fmt.Fprintf(w, "%02x%02x", e.GID[i], e.GID[i+1])
			}
			fmt.Fprintf(w, "%s\n", suffix)
		}
	}
}

// flagName names one capability bit.
type flagName struct {
	bit  uint64
	name string
}

// deviceCapNames are the device_cap_flags bits ibv_devinfo names, in its
// order (enum ibv_device_cap_flags).
var deviceCapNames = []flagName{
	{uint64(verbs.DeviceResizeMaxWR), "RESIZE_MAX_WR"},
	{uint64(verbs.DeviceBadPKeyCntr), "BAD_PKEY_CNTR"},
	{uint64(verbs.DeviceBadQKeyCntr), "BAD_QKEY_CNTR"},
	{uint64(verbs.DeviceRawMulti), "RAW_MULTI"},
	{uint64(verbs.DeviceAutoPathMig), "AUTO_PATH_MIG"},
	{uint64(verbs.DeviceChangePhyPort), "CHANGE_PHY_PORT"},
	{uint64(verbs.DeviceUDAVPortEnforce), "UD_AV_PORT_ENFORCE"},
	{uint64(verbs.DeviceCurrQPStateMod), "CURR_QP_STATE_MOD"},
	{uint64(verbs.DeviceShutdownPort), "SHUTDOWN_PORT"},
	{uint64(verbs.DeviceInitType), "INIT_TYPE"},
	{uint64(verbs.DevicePortActiveEvent), "PORT_ACTIVE_EVENT"},
	{uint64(verbs.DeviceSysImageGUID), "SYS_IMAGE_GUID"},
	{uint64(verbs.DeviceRCRNRNAKGen), "RC_RNR_NAK_GEN"},
	{uint64(verbs.DeviceSRQResize), "SRQ_RESIZE"},
	{uint64(verbs.DeviceNNotifyCQ), "N_NOTIFY_CQ"},
	{uint64(verbs.DeviceMemWindow), "MEM_WINDOW"},
	{uint64(verbs.DeviceUDIPCsum), "UD_IP_CSUM"},
	{uint64(verbs.DeviceXRC), "XRC"},
	{uint64(verbs.DeviceMemMgtExtensions), "MEM_MGT_EXTENSIONS"},
	{uint64(verbs.DeviceMemWindowType2A), "MEM_WINDOW_TYPE_2A"},
	{uint64(verbs.DeviceMemWindowType2B), "MEM_WINDOW_TYPE_2B"},
	{uint64(verbs.DeviceRCIPCsum), "RC_IP_CSUM"},
	{uint64(verbs.DeviceRawIPCsum), "RAW_IP_CSUM"},
	{uint64(verbs.DeviceManagedFlowSteer), "MANAGED_FLOW_STEERING"},
}

// deviceCapCCDMABounce is IBV_DEVICE_CC_DMA_BOUNCE, which package verbs does
// not name because a goroce device never sets it.
const deviceCapCCDMABounce = 1 << 41

// deviceCapExNames are the bits above 31 of device_cap_flags_ex that
// ibv_devinfo names.
var deviceCapExNames = []flagName{
	{uint64(verbs.DeviceRawScatterFCS), "RAW_SCATTER_FCS"},
	{uint64(verbs.DevicePCIWriteEndPadding), "PCI_WRITE_END_PADDING"},
	{deviceCapCCDMABounce, "CC_DMA_BOUNCE"},
}

// printFlags writes one line per named bit set in flags, then the bits
// without a name, as ibv_devinfo's "Unknown flags" line.
func printFlags(w io.Writer, flags uint64, names []flagName) {
	known := uint64(0)
	for _, n := range names {
		known |= n.bit
		if flags&n.bit != 0 {
			fmt.Fprintf(w, "\t\t\t\t\t%s\n", n.name)
		}
	}
	if u := flags &^ known; u != 0 {
		fmt.Fprintf(w, "\t\t\t\t\tUnknown flags: 0x%X\n", u)
	}
}

// The value names below are ibv_devinfo's own, which differ in places from
// libibverbs' *_str functions (port states, for one).

func portStateStr(s verbs.PortState) string {
	switch s {
	case verbs.PortDown:
		return "PORT_DOWN"
	case verbs.PortInit:
		return "PORT_INIT"
	case verbs.PortArmed:
		return "PORT_ARMED"
	case verbs.PortActive:
		return "PORT_ACTIVE"
	}
	return "invalid state"
}

func physStateStr(s verbs.PhysPortState) string {
	names := [...]string{1: "SLEEP", 2: "POLLING", 3: "DISABLED", 4: "PORT_CONFIGURATION TRAINNING",
		5: "LINK_UP", 6: "LINK_ERROR_RECOVERY", 7: "PHY TEST"}
	if int(s) < len(names) && names[s] != "" {
		return names[s]
	}
	return "invalid physical state"
}

func atomicCapStr(c verbs.AtomicCap) string {
	switch c {
	case verbs.AtomicNone, verbs.AtomicHCA, verbs.AtomicGlob:
		return c.String()
	}
	return "invalid atomic capability"
}

func mtuStr(m verbs.MTU) string {
	if !m.Valid() {
		return "invalid MTU"
	}
	return strconv.Itoa(m.Bytes())
}

func widthStr(w verbs.PortWidth) string {
	switch w {
	case verbs.Width1X:
		return "1"
	case verbs.Width4X:
		return "4"
	case verbs.Width8X:
		return "8"
	case verbs.Width12X:
		return "12"
	case verbs.Width2X:
		return "2"
	}
	return "invalid width"
}

// speedStr names a lane speed as ibv_devinfo does: the nominal rate, with
// FDR10 shown as 10.0 Gbps and EDR as 25.0 Gbps.
func speedStr(s verbs.PortSpeed) string {
	switch s {
	case verbs.SpeedSDR:
		return "2.5 Gbps"
	case verbs.SpeedDDR:
		return "5.0 Gbps"
	case verbs.SpeedQDR, verbs.SpeedFDR10:
		return "10.0 Gbps"
	case verbs.SpeedFDR:
		return "14.0 Gbps"
	case verbs.SpeedEDR:
		return "25.0 Gbps"
	case verbs.SpeedHDR:
		return "50.0 Gbps"
	case verbs.SpeedNDR:
		return "100.0 Gbps"
	}
	return "invalid speed"
}

// vlStr decodes the VL capability encoding (1: VL0, 2: VL0-1, 3: VL0-3,
// 4: VL0-7, 5: VL0-14) into the number of data VLs.
func vlStr(n uint8) string {
	names := [...]string{1: "1", 2: "2", 3: "4", 4: "8", 5: "15"}
	if int(n) < len(names) && names[n] != "" {
		return names[n]
	}
	return "invalid value"
}

func linkLayerStr(l verbs.LinkLayer) string {
	switch l {
	case verbs.LinkLayerUnspecified:
		return "Unspecified"
	case verbs.LinkLayerInfiniBand, verbs.LinkLayerEthernet:
		return l.String()
	}
	return "Unknown"
}

func gidTypeStr(t verbs.GIDType) string {
	switch t {
	case verbs.GIDTypeIB, verbs.GIDTypeRoCEv1:
		// Both are "IB/RoCE v1" in sysfs, which ibv_devinfo reads.
		return "RoCE v1"
	case verbs.GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return "Invalid gid type"
}
