package verbs

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

func TestOpenValidation(t *testing.T) {
	tests := []struct {
		name  string
		cfg   DeviceConfig
		want  error
		field string
	}{
		{"no address", DeviceConfig{}, ErrInvalidArgument, "Addr"},
		{"unspecified v4", DeviceConfig{Addr: netip.MustParseAddr("0.0.0.0")}, ErrInvalidArgument, "Addr"},
		{"unspecified v6", DeviceConfig{Addr: netip.MustParseAddr("::")}, ErrInvalidArgument, "Addr"},
		{"multicast", DeviceConfig{Addr: netip.MustParseAddr("239.1.1.1")}, ErrInvalidArgument, "Addr"},
		{"MTU 6", DeviceConfig{Addr: netip.MustParseAddr("127.0.1.1"), MTU: 6}, ErrInvalidArgument, "MTU"},
		{"MTU -1", DeviceConfig{Addr: netip.MustParseAddr("127.0.1.1"), MTU: -1}, ErrInvalidArgument, "MTU"},
		{"negative limit", DeviceConfig{Addr: netip.MustParseAddr("127.0.1.1"), Limits: &DeviceAttr{MaxPD: -1}}, ErrInvalidArgument, "Limits.MaxPD"},
		{"MaxMR over key range", DeviceConfig{Addr: netip.MustParseAddr("127.0.1.1"), Limits: &DeviceAttr{MaxMR: capMaxMR + 1}}, ErrInvalidArgument, "Limits.MaxMR"},
		{"MaxQP over QPN space", DeviceConfig{Addr: netip.MustParseAddr("127.0.1.1"), Limits: &DeviceAttr{MaxQP: 1 << 24}}, ErrInvalidArgument, "Limits.MaxQP"},
		{"MaxMRSize over MaxInt64", DeviceConfig{Addr: netip.MustParseAddr("127.0.1.1"), Limits: &DeviceAttr{MaxMRSize: 1 << 63}}, ErrInvalidArgument, "Limits.MaxMRSize"},
		{"ok v4", DeviceConfig{Addr: netip.MustParseAddr("127.0.1.1")}, nil, ""},
		{"ok v6", DeviceConfig{Addr: netip.MustParseAddr("::1")}, nil, ""},
		{"ok limits", DeviceConfig{Addr: netip.MustParseAddr("127.0.1.1"), Limits: &DeviceAttr{MaxMR: capMaxMR, MaxQP: capMaxQP}}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Open(tt.cfg)
			wantErr(t, err, tt.want, tt.field)
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
		addr string
		mtu  MTU
		want MTU
	}{
		{"127.0.1.1", 0, MTU4096},
		{"::1", 0, MTU4096},
		{"127.0.1.2", MTU2048, MTU2048},
	}
	// A device binds its address, so only loopback ones open here.
	for _, a := range []string{"192.0.2.1", "2001:db8::5"} {
		if got := defaultActiveMTU(netip.MustParseAddr(a)); got != MTU1024 {
			t.Errorf("default MTU on %s = %v, want 1024", a, got)
		}
	}
	for _, tt := range tests {
		d := openDevice(t, DeviceConfig{Addr: netip.MustParseAddr(tt.addr), MTU: tt.mtu})
		pa, err := d.QueryPort(1)
		if err != nil {
			t.Fatal(err)
		}
		if pa.ActiveMTU != tt.want {
			t.Errorf("%s MTU %v: active MTU %v, want %v", tt.addr, tt.mtu, pa.ActiveMTU, tt.want)
		}
		if d.Name() != DefaultDeviceName || d.UDPPort() != DefaultUDPPort {
			t.Errorf("defaults: name %q port %d", d.Name(), d.UDPPort())
		}
	}
	d := openDevice(t, DeviceConfig{Name: "g1", Addr: netip.MustParseAddr("::ffff:127.0.1.9"), Port: 5000})
	if d.Name() != "g1" || d.UDPPort() != 5000 || d.Addr() != netip.MustParseAddr("127.0.1.9") {
		t.Errorf("config not applied: %q %d %v", d.Name(), d.UDPPort(), d.Addr())
	}
}

func TestQueryDevice(t *testing.T) {
	d := newDevice(t)
	a := d.Query()
	def := defaultDeviceAttr()
	checks := []struct {
		name      string
		got, want int
	}{
		{"MaxQP", a.MaxQP, 0x10000},
		{"MaxQPWR", a.MaxQPWR, 0x4000},
		{"MaxSGE", a.MaxSGE, 32},
		{"MaxCQE", a.MaxCQE, 0x7fff},
		{"MaxMR", a.MaxMR, 0xEFFFFF},
		{"MaxPD", a.MaxPD, 0x7ffc},
		{"MaxQPRdAtom", a.MaxQPRdAtom, 128},
		{"MaxSRQWR", a.MaxSRQWR, 0x4000},
		{"MaxPKeys", a.MaxPKeys, 1},
		{"PhysPortCnt", a.PhysPortCnt, 1},
		{"MaxInlineData", a.MaxInlineData, 400},
		{"MaxMW", a.MaxMW, 0x100000},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if a.AtomicCap != AtomicHCA {
		t.Errorf("AtomicCap = %v", a.AtomicCap)
	}
	if a.NodeGUID == 0 || a.SysImageGUID != a.NodeGUID {
		t.Errorf("GUIDs %v %v", a.NodeGUID, a.SysImageGUID)
	}
	if mw := DeviceMemWindow | DeviceMemWindowType2B; a.DeviceCapFlags&mw != mw {
		t.Error("device does not claim memory windows of type 1 and 2B")
	}
	if a.MaxMRSize != def.MaxMRSize {
		t.Errorf("MaxMRSize = %d", a.MaxMRSize)
	}

	limited := openDevice(t, DeviceConfig{Addr: netip.MustParseAddr("127.0.1.2"), Limits: &DeviceAttr{MaxQP: 3, MaxCQE: 10, NodeGUID: 42}})
	la := limited.Query()
	if la.MaxQP != 3 || la.MaxCQE != 10 || la.MaxPD != def.MaxPD {
		t.Errorf("limits not merged: %+v", la)
	}
	if la.NodeGUID == 42 {
		t.Error("Limits overrode an identity field")
	}
}

func TestQueryPortAndTables(t *testing.T) {
	d := openDevice(t, DeviceConfig{Addr: netip.MustParseAddr("127.1.16.62"), Port: 4791})
	pa, err := d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	if pa.State != PortActive || pa.MaxMTU != MTU4096 || pa.LinkLayer != LinkLayerEthernet ||
		pa.PKeyTblLen != 1 || pa.GIDTblLen != 2 || pa.MaxMsgSize != 1<<31 || pa.PhysState != PhysPortStateLinkUp {
		t.Errorf("port attributes %+v", pa)
	}
	for _, port := range []int{0, 2, -1} {
		_, err := d.QueryPort(port)
		wantErr(t, err, ErrInvalidArgument, "port_num")
	}

	table := d.GIDTable()
	if len(table) != 2 {
		t.Fatalf("GID table %v", table)
	}
	ll, v4 := table[0].GID, table[1].GID
	if ll[0] != 0xfe || ll[1] != 0x80 || binary.BigEndian.Uint64(ll[8:]) != uint64(d.Query().NodeGUID) {
		t.Errorf("GID[0] = %v, want fe80::/64 with the node GUID %v", ll, d.Query().NodeGUID)
	}
	if v4.String() != "::ffff:127.1.16.62" {
		t.Errorf("GID[1] = %v", v4)
	}
	for i, e := range table {
		if e.Index != i || e.Port != 1 || e.Type != GIDTypeRoCEv2 {
			t.Errorf("GID entry %d = %+v", i, e)
		}
		g, err := d.QueryGID(1, i)
		if err != nil || g != e.GID {
			t.Errorf("QueryGID(1, %d) = %v, %v", i, g, err)
		}
	}
	// GIDTable returns a copy.
	table[1].GID = GID{}
	if g, _ := d.QueryGID(1, 1); g.IsZero() {
		t.Error("GIDTable exposes the device's table")
	}

	bad := []struct {
		port, index int
		field       string
	}{{2, 0, "port_num"}, {0, 0, "port_num"}, {1, 2, "index"}, {1, -1, "index"}, {1, 1024, "index"}}
	for _, b := range bad {
		_, err := d.QueryGID(b.port, b.index)
		wantErr(t, err, ErrInvalidArgument, b.field)
	}

	v6 := openDevice(t, DeviceConfig{Addr: netip.MustParseAddr("::1")})
	if g, _ := v6.QueryGID(1, 1); g.String() != "::1" {
		t.Errorf("IPv6 device GID[1] = %v", g)
	}

	if pk, err := d.QueryPKey(1, 0); err != nil || pk != 0xFFFF {
		t.Errorf("QueryPKey(1, 0) = %#x, %v", pk, err)
	}
	_, err = d.QueryPKey(1, 1)
	wantErr(t, err, ErrInvalidArgument, "index")
	_, err = d.QueryPKey(2, 0)
	wantErr(t, err, ErrInvalidArgument, "port_num")
}

func TestResourceLimits(t *testing.T) {
	d := openDevice(t, DeviceConfig{Limits: &DeviceAttr{MaxPD: 2, MaxCQ: 1, MaxMR: 1, MaxQP: 1, MaxSRQ: 1, MaxAH: 1}})
	pd := mustPD(t, d)
	pd2 := mustPD(t, d)
	_, err := d.AllocPD()
	wantErr(t, err, ErrResourceLimit, "max_pd")

	cq := mustCQ(t, d, 4)
	_, err = d.CreateCQ(4, nil, 0)
	wantErr(t, err, ErrResourceLimit, "max_cq")

	mr := mustMR(t, pd, 16, AccessLocalWrite)
	_, err = pd.RegMR(make([]byte, 16), AccessLocalWrite)
	wantErr(t, err, ErrResourceLimit, "max_mr")

	qp := mustQP(t, pd, QPTypeRC, cq)
	_, err = pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: cq, RecvCQ: cq})
	wantErr(t, err, ErrResourceLimit, "max_qp")

	srq, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 1})
	wantErr(t, err, nil, "")
	_, err = pd.CreateSRQ(SRQInitAttr{MaxWR: 1})
	wantErr(t, err, ErrResourceLimit, "max_srq")

	ah, err := pd.CreateAH(remoteAV())
	wantErr(t, err, nil, "")
	_, err = pd.CreateAH(remoteAV())
	wantErr(t, err, ErrResourceLimit, "max_ah")

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
	d, err := Open(DeviceConfig{Addr: netip.MustParseAddr("127.0.1.1")})
	if err != nil {
		t.Fatal(err)
	}
	pd := mustPD(t, d)
	ch, err := d.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(8, ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	mr := mustMR(t, pd, 64, AccessLocalWrite|AccessRemoteWrite)
	key := mr.RKey()
	srq, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 4})
	if err != nil {
		t.Fatal(err)
	}
	ah, err := pd.CreateAH(remoteAV())
	if err != nil {
		t.Fatal(err)
	}
	qp := mustQP(t, pd, QPTypeRC, cq)
	qpn := qp.QPN()
	srqQP, err := pd.CreateQP(QPInitAttr{QPType: QPTypeUD, SendCQ: cq, RecvCQ: cq, SRQ: srq})
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
	wantErr(t, <-got, ErrClosed, "channel")
	wantErr(t, d.Close(), ErrClosed, "device")

	if d.lookupMR(key) != nil || d.lookupQP(qpn) != nil {
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
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	creates := map[string]error{}
	_, creates["AllocPD"] = d.AllocPD()
	_, creates["CreateCQ"] = d.CreateCQ(1, nil, 0)
	_, creates["CreateCompChannel"] = d.CreateCompChannel()
	_, creates["RegMR"] = pd.RegMR(make([]byte, 1), 0)
	for name, err := range creates {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

func TestQPNAssignment(t *testing.T) {
	d := newDevice(t)
	pd := mustPD(t, d)
	cq := mustCQ(t, d, 16)
	// Start just below the top of the QPN space to exercise the wrap,
	// and occupy the number after the wrap to exercise the skip.
	d.nextQPN = qpnMax - 1
	first := mustQP(t, pd, QPTypeUD, cq) // qpnMax-1
	seen := map[uint32]bool{first.QPN(): true}
	d.nextQPN = qpnMin
	blocker := mustQP(t, pd, QPTypeUD, cq) // qpnMin
	seen[blocker.QPN()] = true
	d.nextQPN = qpnMax
	for range 3 {
		qp := mustQP(t, pd, QPTypeUD, cq)
		n := qp.QPN()
		if n < qpnMin || n > qpnMax || seen[n] {
			t.Fatalf("QPN %#x invalid or duplicate (seen %v)", n, seen)
		}
		seen[n] = true
		if d.lookupQP(n) != qp {
			t.Fatalf("lookupQP(%#x) does not find the QP", n)
		}
	}
	for _, want := range []uint32{qpnMax, qpnMin + 1, qpnMin + 2} {
		if !seen[want] {
			t.Errorf("QPN %#x not assigned; got %v", want, seen)
		}
	}
	if err := first.Destroy(); err != nil {
		t.Fatal(err)
	}
	if d.lookupQP(qpnMax-1) != nil {
		t.Error("destroyed QP still found")
	}
	if d.lookupQP(0) != nil || d.lookupQP(1) != nil {
		t.Error("QP0/QP1 found")
	}
}
