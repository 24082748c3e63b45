//go:build linux && cgo && goroce_ibverbs

package cm

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmacm"
	"github.com/goroce/goroce/verbs"
)

func init() { kernelHosts = hwHosts }

// hwHosts returns two hosts on the kernel device of GOROCE_RDMACM_ADDR,
// on the device the event API opens for it (hwDevice), so that an ID's
// Device is the host's.
func hwHosts(t *testing.T) (a, b *host) {
	t.Helper()
	s := os.Getenv("GOROCE_RDMACM_ADDR")
	if s == "" {
		t.Skip("no kernel RDMA device address here (set GOROCE_RDMACM_ADDR, or run test/hw/run.sh)")
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("GOROCE_RDMACM_ADDR: %v", err)
	}
	name := hwDeviceName(t, ip)
	dev, err := hwDevice(name) // opened before checkLeaks: it stays open
	if err != nil {
		t.Fatal(err)
	}
	checkLeaks(t)
	return hwHost(t, dev, ip), hwHost(t, dev, ip)
}

// hwDeviceName asks librdmacm which device holds ip.
func hwDeviceName(t *testing.T, ip netip.Addr) string {
	t.Helper()
	ch, err := rdmacm.NewEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	id, err := ch.CreateID()
	if err != nil {
		t.Fatal(err)
	}
	defer id.Destroy()
	if err := id.BindAddr(netip.AddrPortFrom(ip, 0)); err != nil {
		t.Fatal(err)
	}
	if id.DeviceName() == "" {
		t.Fatalf("%v is no RDMA device's", ip)
	}
	return id.DeviceName()
}

// hwHost makes a host's PD, CQ and registered buffer on dev.
func hwHost(t *testing.T, dev *verbs.Device, ip netip.Addr) *host {
	t.Helper()
	h := &host{dev: dev, buf: make([]byte, 1<<16), ip: ip}
	var err error
	if h.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.pd.Dealloc() })
	if h.cq, err = dev.CreateCQ(256, nil, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.cq.Destroy() })
	h.mr, err = h.pd.RegMR(h.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.mr.Dereg() })
	return h
}

// TestHardwareIDOptions: on a kernel device, options set before the ID
// had one reach the QP (TOS, ACK timeout), an unbound ID resolves through
// the kernel's routing, the reasons librdmacm cannot send and the CM
// timers are refused, and RejectVendorOption is rdma_reject_ece's.
func TestHardwareIDOptions(t *testing.T) {
	a, b := hwHosts(t)
	cha, chb := NewEventChannel(), NewEventChannel()
	defer cha.Close()
	defer chb.Close()
	l, err := chb.CreateID(nil, PortSpaceTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Destroy()
	if err := l.SetReuseAddr(true); err != nil {
		t.Fatal(err)
	}
	if err := l.BindAddr(netip.AddrPortFrom(b.addr(), 0)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(0); err != nil {
		t.Fatal(err)
	}

	ida, err := cha.CreateID(nil, PortSpaceTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer ida.Destroy()
	if err := ida.SetTOS(32); err != nil {
		t.Fatal(err)
	}
	if err := ida.SetAckTimeout(14); err != nil {
		t.Fatal(err)
	}
	// No source: the kernel's routing picks the device.
	if err := ida.ResolveAddr(netip.AddrPort{}, l.LocalAddr(), time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, cha, EventAddrResolved)
	if ida.Device() != a.dev || ida.LocalAddr().Addr() != a.addr() || ida.LocalAddr().Port() == 0 {
		t.Fatalf("resolved from %v on %v", ida.LocalAddr(), ida.Device())
	}
	if err := ida.SetCMTimeouts(8, 1); !errors.Is(err, verbs.ErrNotSupported) {
		t.Errorf("SetCMTimeouts on a kernel device: %v", err)
	}
	if _, ok := ida.Route(); ok {
		t.Error("a route before ResolveRoute")
	}
	if err := ida.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, cha, EventRouteResolved)
	// The kernel's path: the GIDs of the addresses (IPv4-mapped), the
	// TOS as traffic class, an MTU below the link's 1500 bytes.
	gid := verbs.GIDFromAddr(a.addr())
	r, ok := ida.Route()
	if !ok || r.SGID != gid || r.DGID != verbs.GIDFromAddr(b.addr()) || r.TrafficClass != 32 ||
		r.PathMTU != verbs.MTU1024 || r.UDPPort != verbs.DefaultUDPPort || r.HopLimit == 0 || r.FlowLabel > 0xFFFFF {
		t.Errorf("route %+v, %v", r, ok)
	}
	t.Logf("the kernel's route: %+v", r)
	qa := smallQP(t, ida, a)
	defer ida.DestroyQP()
	if err := ida.Connect(nil); err != nil {
		t.Fatal(err)
	}
	idb := expect(t, chb, EventConnectRequest).ID
	defer idb.Destroy()
	if err := idb.RejectWith(RejectNoResources, nil); !errors.Is(err, verbs.ErrNotSupported) {
		t.Errorf("RejectWith(%v) on a kernel device: %v", RejectNoResources, err)
	}
	if err := idb.RejectWith(RejectVendorOption, []byte("no ECE")); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, cha, EventRejected)
	if ev.Status != int(RejectVendorOption) || !bytes.HasPrefix(ev.Conn.PrivateData, []byte("no ECE")) {
		t.Fatalf("rejection: status %d, %v, %q", ev.Status, ev.Err, ev.Conn.PrivateData)
	}
	attr, _, err := qa.Query(0)
	if err != nil {
		t.Fatal(err)
	}
	if attr.QPState != verbs.QPStateErr {
		t.Errorf("QP after the REJ: %v", attr.QPState)
	}

	// The options on a connection that is accepted.
	idc, err := cha.CreateID(nil, PortSpaceTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer idc.Destroy()
	if err := idc.SetTOS(32); err != nil {
		t.Fatal(err)
	}
	if err := idc.SetAckTimeout(14); err != nil {
		t.Fatal(err)
	}
	if err := idc.ResolveAddr(netip.AddrPortFrom(a.addr(), 0), l.LocalAddr(), time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, cha, EventAddrResolved)
	if err := idc.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, cha, EventRouteResolved)
	qc := smallQP(t, idc, a)
	defer idc.DestroyQP()
	if err := idc.Connect(nil); err != nil {
		t.Fatal(err)
	}
	idd := expect(t, chb, EventConnectRequest).ID
	if r, ok := idd.Route(); !ok || r.SGID != verbs.GIDFromAddr(b.addr()) || r.DGID != verbs.GIDFromAddr(a.addr()) {
		t.Errorf("the request's route %+v, %v", r, ok)
	}
	defer idd.Destroy()
	smallQP(t, idd, b)
	defer idd.DestroyQP()
	if err := idd.Accept(nil); err != nil {
		t.Fatal(err)
	}
	expect(t, cha, EventEstablished)
	expect(t, chb, EventEstablished)
	attr, _, err = qc.Query(0)
	if err != nil {
		t.Fatal(err)
	}
	if attr.Timeout != 14 || attr.AHAttr.TrafficClass != 32 {
		t.Errorf("QP timeout %d, traffic class %d; want 14 and 32", attr.Timeout, attr.AHAttr.TrafficClass)
	}
}
