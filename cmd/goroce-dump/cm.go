package main

import (
	"bufio"
	"fmt"
	"net/netip"
	"strconv"

	cmmad "github.com/goroce/goroce/internal/mad"
	"github.com/goroce/goroce/internal/wire"
)

// This file decodes the connection manager's messages (IBA vol. 1 chapter
// 12, with rdma_cm's addressing) carried by a MAD to QP 1, through
// internal/mad: the one-line tokens after mad=CM_..., and the verbose CM
// line.

// cmOf decodes the CM message of pkt, a UD packet to QP 1 whose MAD header
// says class CM. ok is false for other packets; err is set for a CM MAD
// that does not parse.
func cmOf(pkt *wire.Packet) (m cmmad.Message, ok bool, err error) {
	h, isMAD := parseMAD(pkt)
	if !isMAD || h.class != madClassCM || !cmmad.AttrID(h.attr).IsCM() {
		return nil, false, nil
	}
	_, m, err = cmmad.Decode(pkt.Payload)
	return m, true, err
}

// writeCMLine appends the one-line tokens of pkt's CM message, if any:
// the comm IDs, the service ID as port space and port, QPN, starting PSN,
// the rdma_cm header's addresses, the reject reason, and pdata, the
// private data's length.
func writeCMLine(w *bufio.Writer, pkt *wire.Packet) {
	m, ok, err := cmOf(pkt)
	switch {
	case !ok:
		return
	case err != nil:
		fmt.Fprintf(w, " malformed(%v)", err)
		return
	}
	for _, t := range cmTokens(m, false) {
		w.WriteByte(' ')
		w.WriteString(t)
	}
}

// writeCMVerbose writes the CM line of the verbose output.
func writeCMVerbose(w *bufio.Writer, ind string, pkt *wire.Packet) {
	m, ok, err := cmOf(pkt)
	switch {
	case !ok:
		return
	case err != nil:
		fmt.Fprintf(w, "%sCM    malformed: %v\n", ind, err)
		return
	}
	fmt.Fprintf(w, "%sCM    %s", ind, m.AttrID())
	for _, t := range cmTokens(m, true) {
		w.WriteByte(' ')
		w.WriteString(t)
	}
	w.WriteByte('\n')
}

// cmTokens lists a message's fields as key=value tokens; verbose adds
// what the one-line form leaves out.
func cmTokens(m cmmad.Message, verbose bool) []string {
	var t []string
	add := func(k string, format string, a ...any) { t = append(t, k+"="+fmt.Sprintf(format, a...)) }
	comm := func(l, r uint32) {
		add("lcid", "0x%08x", l)
		add("rcid", "0x%08x", r)
	}
	switch m := m.(type) {
	case *cmmad.REQ:
		add("lcid", "0x%08x", m.LocalCommID)
		add("svc", "%s", serviceName(m.ServiceID))
		add("qpn", "0x%06x", m.LocalQPN)
		add("psn", "0x%06x", m.StartingPSN)
		if verbose {
			add("type", "%v", m.TransportServiceType)
			add("mtu", "%d", 128<<m.PathMTU)
			add("rr", "%d", m.ResponderResources)
			add("id", "%d", m.InitiatorDepth)
			add("retry", "%d", m.RetryCount)
			add("rnr_retry", "%d", m.RNRRetryCount)
			add("cm_timeout", "%d/%d", m.LocalCMResponseTimeout, m.RemoteCMResponseTimeout)
			add("max_cm_retries", "%d", m.MaxCMRetries)
			add("guid", "0x%016x", m.LocalCAGUID)
			add("pkey", "0x%04x", m.PKey)
			p := &m.Primary
			add("path", "%v→%v", p.LocalGID, p.RemoteGID)
			add("flow", "0x%05x", p.FlowLabel)
			add("tclass", "%d", p.TrafficClass)
			add("hop", "%d", p.HopLimit)
			add("ack_timeout", "%d", p.LocalACKTimeout)
		}
		t = append(t, cmaTokens(m.ServiceID, m.PrivateData)...)
	case *cmmad.REP:
		comm(m.LocalCommID, m.RemoteCommID)
		add("qpn", "0x%06x", m.LocalQPN)
		add("psn", "0x%06x", m.StartingPSN)
		if verbose {
			add("rr", "%d", m.ResponderResources)
			add("id", "%d", m.InitiatorDepth)
			add("rnr_retry", "%d", m.RNRRetryCount)
			add("ack_delay", "%d", m.TargetACKDelay)
			add("guid", "0x%016x", m.LocalCAGUID)
		}
		add("pdata", "%d", pdataLen(m.PrivateData))
	case *cmmad.REJ:
		comm(m.LocalCommID, m.RemoteCommID)
		add("reason", "%d(%v)", uint16(m.Reason), m.Reason)
		add("rejected", "%v", m.MsgRejected)
		if verbose && len(m.ARI) > 0 {
			add("ari", "%x", m.ARI)
		}
		add("pdata", "%d", pdataLen(m.PrivateData))
	case *cmmad.MRA:
		comm(m.LocalCommID, m.RemoteCommID)
		add("mraed", "%v", m.MsgMRAed)
		add("timeout", "%d", m.ServiceTimeout)
	case *cmmad.RTU:
		comm(m.LocalCommID, m.RemoteCommID)
	case *cmmad.DREQ:
		comm(m.LocalCommID, m.RemoteCommID)
		add("rqpn", "0x%06x", m.RemoteQPN)
	case *cmmad.DREP:
		comm(m.LocalCommID, m.RemoteCommID)
	case *cmmad.SIDRREQ:
		add("reqid", "0x%08x", m.RequestID)
		add("svc", "%s", serviceName(m.ServiceID))
		if verbose {
			add("pkey", "0x%04x", m.PKey)
		}
		t = append(t, cmaTokens(m.ServiceID, m.PrivateData)...)
	case *cmmad.SIDRREP:
		add("reqid", "0x%08x", m.RequestID)
		add("status", "%d(%v)", uint8(m.Status), m.Status)
		add("qpn", "0x%06x", m.QPN)
		add("qkey", "0x%08x", m.QKey)
		if verbose {
			add("svc", "%s", serviceName(m.ServiceID))
		}
		add("pdata", "%d", pdataLen(m.PrivateData))
	case *cmmad.LAP:
		comm(m.LocalCommID, m.RemoteCommID)
	case *cmmad.APR:
		comm(m.LocalCommID, m.RemoteCommID)
	}
	return t
}

// serviceName is an rdma_cm service ID as port space and port ("TCP:7174"),
// or the service ID in hex.
func serviceName(s cmmad.ServiceID) string {
	if ps, port, ok := s.RDMA(); ok {
		return ps.String() + ":" + strconv.Itoa(int(port))
	}
	return s.String()
}

// cmaTokens decodes the rdma_cm header at the start of the private data of
// a REQ or SIDR_REQ to an rdma_cm service: "cma=SRC:PORT→DST" and the
// length of the application's private data after it; other services have
// no header.
func cmaTokens(s cmmad.ServiceID, pd []byte) []string {
	if _, _, ok := s.RDMA(); !ok {
		return []string{"pdata=" + strconv.Itoa(pdataLen(pd))}
	}
	h, err := cmmad.ParseCMAHeader(pd)
	if err != nil {
		return []string{fmt.Sprintf("cma=malformed(%v)", err), "pdata=" + strconv.Itoa(pdataLen(pd))}
	}
	src := netip.AddrPortFrom(h.Src, h.SrcPort)
	return []string{"cma=" + src.String() + "→" + h.Dst.String(), "pdata=" + strconv.Itoa(pdataLen(pd[cmmad.CMAHeaderSize:]))}
}

// pdataLen is the private data's length up to its last non-zero byte: the
// wire carries the whole field, zero-padded, and no length.
func pdataLen(pd []byte) int {
	n := len(pd)
	for n > 0 && pd[n-1] == 0 {
		n--
	}
	return n
}
