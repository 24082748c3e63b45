package verbs_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

func TestOpenValidation(t *testing.T) {
	tests := []struct {
		name  string
		cfg   verbs.DeviceConfig
		want  error
		field string
	}{
		{"no address", verbs.DeviceConfig{}, verbs.ErrInvalidArgument, "Addr"},
		{"unspecified v4", verbs.DeviceConfig{Addr: netip.MustParseAddr("0.0.0.0")}, verbs.ErrInvalidArgument, "Addr"},
		{"unspecified v6", verbs.DeviceConfig{Addr: netip.MustParseAddr("::")}, verbs.ErrInvalidArgument, "Addr"},
		{"multicast", verbs.DeviceConfig{Addr: netip.MustParseAddr("239.1.1.1")}, verbs.ErrInvalidArgument, "Addr"},
		{"MTU 6", verbs.DeviceConfig{Addr: testkit.Addr(1), MTU: 6}, verbs.ErrInvalidArgument, "MTU"},
		{"MTU -1", verbs.DeviceConfig{Addr: testkit.Addr(1), MTU: -1}, verbs.ErrInvalidArgument, "MTU"},
		{"negative limit", verbs.DeviceConfig{Addr: testkit.Addr(1), Limits: &verbs.DeviceAttr{MaxPD: -1}}, verbs.ErrInvalidArgument, "Limits.MaxPD"},
		{"MaxMR over key range", verbs.DeviceConfig{Addr: testkit.Addr(1), Limits: &verbs.DeviceAttr{MaxMR: verbs.CapMaxMR + 1}}, verbs.ErrInvalidArgument, "Limits.MaxMR"},
		{"MaxQP over QPN space", verbs.DeviceConfig{Addr: testkit.Addr(1), Limits: &verbs.DeviceAttr{MaxQP: 1 << 24}}, verbs.ErrInvalidArgument, "Limits.MaxQP"},
		{"MaxMRSize over MaxInt64", verbs.DeviceConfig{Addr: testkit.Addr(1), Limits: &verbs.DeviceAttr{MaxMRSize: 1 << 63}}, verbs.ErrInvalidArgument, "Limits.MaxMRSize"},
		{"ok v4", verbs.DeviceConfig{Addr: testkit.Addr(1)}, nil, ""},
		{"ok v6", verbs.DeviceConfig{Addr: netip.IPv6Loopback(), Port: testkit.Port()}, nil, ""},
		{"ok limits", verbs.DeviceConfig{Addr: testkit.Addr(1), Limits: &verbs.DeviceAttr{MaxMR: verbs.CapMaxMR, MaxQP: verbs.CapMaxQP}}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := verbs.Open(tt.cfg)
			rdmatest.WantError(t, err, tt.want, tt.field)
			if d != nil {
				if err := d.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestOpenDefaults(t *testing.T) {
	tests := []struct {
		addr netip.Addr
		port uint16 // 0: the default
		mtu  verbs.MTU
		want verbs.MTU
	}{
		{testkit.Addr(1), 0, 0, verbs.MTU4096},
		{netip.IPv6Loopback(), testkit.Port(), 0, verbs.MTU4096},
		{testkit.Addr(2), 0, verbs.MTU2048, verbs.MTU2048},
	}
	// A device binds its address, so only loopback ones open here.
	for _, a := range []string{"192.0.2.1", "2001:db8::5"} {
		if got := verbs.DefaultActiveMTU(netip.MustParseAddr(a)); got != verbs.MTU1024 {
			t.Errorf("default MTU on %s = %v, want 1024", a, got)
		}
	}
	for _, tt := range tests {
		d := rdmatest.OpenDevice(t, verbs.DeviceConfig{Addr: tt.addr, Port: tt.port, MTU: tt.mtu})
		pa, err := d.QueryPort(1)
		if err != nil {
			t.Fatal(err)
		}
		if pa.ActiveMTU != tt.want {
			t.Errorf("%s MTU %v: active MTU %v, want %v", tt.addr, tt.mtu, pa.ActiveMTU, tt.want)
		}
		if d.Name() != verbs.DefaultDeviceName || tt.port == 0 && d.UDPPort() != verbs.DefaultUDPPort {
			t.Errorf("defaults: name %q port %d", d.Name(), d.UDPPort())
		}
	}
	d := rdmatest.OpenDevice(t, verbs.DeviceConfig{Name: "g1", Addr: netip.AddrFrom16(testkit.Addr(9).As16()), Port: 5000})
	if d.Name() != "g1" || d.UDPPort() != 5000 || d.Addr() != testkit.Addr(9) {
		t.Errorf("config not applied: %q %d %v", d.Name(), d.UDPPort(), d.Addr())
	}
}

func TestQueryDevice(t *testing.T) {
	d := newDevice(t)
	a := d.Query()
	def := verbs.DefaultDeviceAttr()
	checks := []struct {
		name      string
		got, want int
	}{
		{"MaxQP", a.MaxQP, 0x10000},
		{"MaxQPWR", a.MaxQPWR, 0x4000},
		{"MaxSGE", a.MaxSGE, 32},
		{"MaxCQE", a.MaxCQE, 0x7fff},
		{"MaxMR", a.MaxMR, 1 << 20},
		{"MaxPD", a.MaxPD, 0x7ffc},
		{"MaxQPRdAtom", a.MaxQPRdAtom, 128},
		{"MaxSRQWR", a.MaxSRQWR, 0x4000},
		{"MaxPKeys", a.MaxPKeys, 1},
		{"PhysPortCnt", a.PhysPortCnt, 1},
		{"MaxInlineData", a.MaxInlineData, 400},
		{"MaxMW", a.MaxMW, 1 << 20},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if a.AtomicCap != verbs.AtomicHCA {
		t.Errorf("AtomicCap = %v", a.AtomicCap)
	}
	if a.NodeGUID == 0 || a.SysImageGUID != a.NodeGUID {
		t.Errorf("GUIDs %v %v", a.NodeGUID, a.SysImageGUID)
	}
	if mw := verbs.DeviceMemWindow | verbs.DeviceMemWindowType2B; a.DeviceCapFlags&mw != mw {
		t.Error("device does not claim memory windows of type 1 and 2B")
	}
	if a.MaxMRSize != def.MaxMRSize {
		t.Errorf("MaxMRSize = %d", a.MaxMRSize)
	}

	limited := rdmatest.OpenDevice(t, verbs.DeviceConfig{Addr: testkit.Addr(2), Limits: &verbs.DeviceAttr{MaxQP: 3, MaxCQE: 10, NodeGUID: 42}})
	la := limited.Query()
	if la.MaxQP != 3 || la.MaxCQE != 10 || la.MaxPD != def.MaxPD {
		t.Errorf("limits not merged: %+v", la)
	}
	if la.NodeGUID == 42 {
		t.Error("Limits overrode an identity field")
	}
}

func TestQueryPortAndTables(t *testing.T) {
	d := rdmatest.OpenDevice(t, verbs.DeviceConfig{Addr: testkit.Addr(62), Port: 4791})
	pa, err := d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	if pa.State != verbs.PortActive || pa.MaxMTU != verbs.MTU4096 || pa.LinkLayer != verbs.LinkLayerEthernet ||
		pa.PKeyTblLen != 1 || pa.GIDTblLen != 2 || pa.MaxMsgSize != 1<<31 || pa.PhysState != verbs.PhysPortStateLinkUp {
		t.Errorf("port attributes %+v", pa)
	}
	for _, port := range []int{0, 2, -1} {
		_, err := d.QueryPort(port)
		rdmatest.WantError(t, err, verbs.ErrInvalidArgument, "port_num")
	}

	table := d.GIDTable()
	if len(table) != 2 {
		t.Fatalf("GID table %v", table)
	}
	ll, v4 := table[0].GID, table[1].GID
	if ll[0] != 0xfe || ll[1] != 0x80 || binary.BigEndian.Uint64(ll[8:]) != uint64(d.Query().NodeGUID) {
		t.Errorf("GID[0] = %v, want fe80::/64 with the node GUID %v", ll, d.Query().NodeGUID)
	}
	if v4.String() != "::ffff:"+testkit.Addr(62).String() {
		t.Errorf("GID[1] = %v", v4)
	}
	for i, e := range table {
		if e.Index != i || e.Port != 1 || e.Type != verbs.GIDTypeRoCEv2 {
			t.Errorf("GID entry %d = %+v", i, e)
		}
		g, err := d.QueryGID(1, i)
		if err != nil || g != e.GID {
			t.Errorf("QueryGID(1, %d) = %v, %v", i, g, err)
		}
	}
	// GIDTable returns a copy.
	table[1].GID = verbs.GID{}
	if g, _ := d.QueryGID(1, 1); g.IsZero() {
		t.Error("GIDTable exposes the device's table")
	}

	bad := []struct {
		port, index int
		field       string
	}{{2, 0, "port_num"}, {0, 0, "port_num"}, {1, 2, "index"}, {1, -1, "index"}, {1, 1024, "index"}}
	for _, b := range bad {
		_, err := d.QueryGID(b.port, b.index)
		rdmatest.WantError(t, err, verbs.ErrInvalidArgument, b.field)
	}

	v6 := rdmatest.OpenDevice(t, verbs.DeviceConfig{Addr: netip.IPv6Loopback(), Port: testkit.Port()})
	if g, _ := v6.QueryGID(1, 1); g.String() != "::1" {
		t.Errorf("IPv6 device GID[1] = %v", g)
	}

	if pk, err := d.QueryPKey(1, 0); err != nil || pk != 0xFFFF {
		t.Errorf("QueryPKey(1, 0) = %#x, %v", pk, err)
	}
	_, err = d.QueryPKey(1, 1)
	rdmatest.WantError(t, err, verbs.ErrInvalidArgument, "index")
	_, err = d.QueryPKey(2, 0)
	rdmatest.WantError(t, err, verbs.ErrInvalidArgument, "port_num")
}

func TestResourceLimits(t *testing.T) {
	d := rdmatest.OpenDevice(t, verbs.DeviceConfig{Limits: &verbs.DeviceAttr{MaxPD: 2, MaxCQ: 1, MaxMR: 1, MaxQP: 1, MaxSRQ: 1, MaxAH: 1}})
	pd := rdmatest.PD(t, d)
	pd2 := rdmatest.PD(t, d)
	_, err := d.AllocPD()
	rdmatest.WantError(t, err, verbs.ErrResourceLimit, "max_pd")

	cq := rdmatest.CQ(t, d, 4)
	_, err = d.CreateCQ(4, nil, 0)
	rdmatest.WantError(t, err, verbs.ErrResourceLimit, "max_cq")

	mr := mustMR(t, pd, 16, verbs.AccessLocalWrite)
	_, err = pd.RegMR(make([]byte, 16), verbs.AccessLocalWrite)
	rdmatest.WantError(t, err, verbs.ErrResourceLimit, "max_mr")

	qp := mustQP(t, pd, verbs.QPTypeRC, cq)
	_, err = pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq})
	rdmatest.WantError(t, err, verbs.ErrResourceLimit, "max_qp")

	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 1})
	rdmatest.WantError(t, err, nil, "")
	_, err = pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 1})
	rdmatest.WantError(t, err, verbs.ErrResourceLimit, "max_srq")

	ah, err := pd.CreateAH(remoteAV())
	rdmatest.WantError(t, err, nil, "")
	_, err = pd.CreateAH(remoteAV())
	rdmatest.WantError(t, err, verbs.ErrResourceLimit, "max_ah")

	// A failed creation leaves nothing behind: after freeing one of each,
	// one can be created again and the PD can be deallocated at the end.
	for _, f := range []func() error{qp.Destroy, srq.Destroy, ah.Destroy, mr.Dereg, cq.Destroy, pd2.Dealloc} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.AllocPD(); err != nil {
		t.Errorf("AllocPD after a dealloc: %v", err)
	}
	if _, err := pd.RegMR(make([]byte, 1), 0); err != nil {
		t.Errorf("RegMR after a dereg: %v", err)
	}
}

func TestDeviceClose(t *testing.T) {
	d, err := verbs.Open(verbs.DeviceConfig{Addr: testkit.Addr(1)})
	if err != nil {
		t.Fatal(err)
	}
	pd := rdmatest.PD(t, d)
	ch, err := d.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(8, ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	mr := mustMR(t, pd, 64, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	key := mr.RKey()
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 4})
	if err != nil {
		t.Fatal(err)
	}
	ah, err := pd.CreateAH(remoteAV())
	if err != nil {
		t.Fatal(err)
	}
	qp := mustQP(t, pd, verbs.QPTypeRC, cq)
	qpn := qp.QPN()
	srqQP, err := pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq, SRQ: srq})
	if err != nil {
		t.Fatal(err)
	}

	// A waiter blocked on the channel is released by Close.
	got := make(chan error, 1)
	go func() {
		_, err := ch.GetEvent(context.Background())
		got <- err
	}()

	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	rdmatest.WantError(t, <-got, verbs.ErrClosed, "channel")
	rdmatest.WantError(t, d.Close(), verbs.ErrClosed, "device")

	if d.LookupMR(key) != nil || d.LookupQP(qpn) != nil {
		t.Error("objects still reachable after Close")
	}
	for name, err := range map[string]error{
		"Dealloc":     pd.Dealloc(),
		"Dereg":       mr.Dereg(),
		"CQ.Destroy":  cq.Destroy(),
		"SRQ.Destroy": srq.Destroy(),
		"AH.Destroy":  ah.Destroy(),
		"QP.Destroy":  qp.Destroy(),
		"QP2.Destroy": srqQP.Destroy(),
		"ch.Destroy":  ch.Destroy(),
	} {
		if !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	creates := map[string]error{}
	_, creates["AllocPD"] = d.AllocPD()
	_, creates["CreateCQ"] = d.CreateCQ(1, nil, 0)
	_, creates["CreateCompChannel"] = d.CreateCompChannel()
	_, creates["RegMR"] = pd.RegMR(make([]byte, 1), 0)
	for name, err := range creates {
		if !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

func TestQPNAssignment(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	cq := rdmatest.CQ(t, d, 16)
	// The number asked for, when free; a taken one is skipped.
	d.SetNextQPN(verbs.QPNMax)
	first := mustQP(t, pd, verbs.QPTypeUD, cq)
	if first.QPN() != verbs.QPNMax {
		t.Fatalf("QPN %#x, want %#x", first.QPN(), verbs.QPNMax)
	}
	d.SetNextQPN(verbs.QPNMax)
	second := mustQP(t, pd, verbs.QPTypeUD, cq)
	seen := map[uint32]bool{first.QPN(): true}
	qps := []*verbs.QP{first, second}
	for range 30 {
		qps = append(qps, mustQP(t, pd, verbs.QPTypeUD, cq))
	}
	var near int
	for i, qp := range qps[1:] {
		n := qp.QPN()
		if n < verbs.QPNMin || n > verbs.QPNMax || seen[n] {
			t.Fatalf("QPN %#x invalid or duplicate (seen %v)", n, seen)
		}
		seen[n] = true
		if d.LookupQP(n) != qp {
			t.Fatalf("lookupQP(%#x) does not find the QP", n)
		}
		// Numbers are not in sequence: one does not tell the next.
		if d := int64(n) - int64(qps[i].QPN()); d > -256 && d < 256 {
			near++
		}
	}
	if near > 1 {
		t.Errorf("%d of %d QP numbers within 256 of the previous one", near, len(qps)-1)
	}
	if err := first.Destroy(); err != nil {
		t.Fatal(err)
	}
	if d.LookupQP(verbs.QPNMax) != nil {
		t.Error("destroyed QP still found")
	}
	if d.LookupQP(0) != nil || d.LookupQP(1) != nil {
		t.Error("QP0/QP1 found")
	}
}
