package verbs

import (
	"net/netip"
	"testing"
)

// Ports rdma-core's tests/test_pd.py: alloc, dealloc, multiple PDs, double
// destroy, and dealloc of a PD still in use.

func TestPDAllocDealloc(t *testing.T) {
	d := newDevice(t)
	pds := make([]*PD, 10)
	for i := range pds {
		pds[i] = mustPD(t, d)
		if pds[i].Device() != d {
			t.Fatal("PD.Device is not its device")
		}
	}
	for _, pd := range pds {
		if err := pd.Dealloc(); err != nil {
			t.Fatalf("Dealloc: %v", err)
		}
	}
	wantErr(t, pds[0].Dealloc(), ErrClosed, "pd")
}

func TestPDDeallocBusy(t *testing.T) {
	d := newDevice(t)
	cq := mustCQ(t, d, 4)
	users := []struct {
		name   string
		create func(pd *PD) (destroy func() error)
	}{
		{"MR", func(pd *PD) func() error { return mustMR(t, pd, 8, 0).Dereg }},
		{"QP", func(pd *PD) func() error { return mustQP(t, pd, QPTypeRC, cq).Destroy }},
		{"SRQ", func(pd *PD) func() error {
			srq, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 2})
			if err != nil {
				t.Fatal(err)
			}
			return srq.Destroy
		}},
		{"AH", func(pd *PD) func() error {
			ah, err := pd.CreateAH(remoteAV())
			if err != nil {
				t.Fatal(err)
			}
			return ah.Destroy
		}},
	}
	for _, u := range users {
		t.Run(u.name, func(t *testing.T) {
			pd := mustPD(t, d)
			destroy := u.create(pd)
			wantErr(t, pd.Dealloc(), ErrBusy, "pd")
			if err := destroy(); err != nil {
				t.Fatal(err)
			}
			if err := pd.Dealloc(); err != nil {
				t.Fatalf("Dealloc after destroying the %s: %v", u.name, err)
			}
		})
	}
}

func TestPDClosedRejectsNewObjects(t *testing.T) {
	d := newDevice(t)
	cq := mustCQ(t, d, 4)
	pd := mustPD(t, d)
	if err := pd.Dealloc(); err != nil {
		t.Fatal(err)
	}
	_, err := pd.RegMR(make([]byte, 8), 0)
	wantErr(t, err, ErrClosed, "pd")
	_, err = pd.CreateQP(QPInitAttr{QPType: QPTypeRC, SendCQ: cq, RecvCQ: cq})
	wantErr(t, err, ErrClosed, "pd")
	_, err = pd.CreateSRQ(SRQInitAttr{MaxWR: 1})
	wantErr(t, err, ErrClosed, "pd")
	_, err = pd.CreateAH(remoteAV())
	wantErr(t, err, ErrClosed, "pd")

	var nilPD *PD
	_, err = nilPD.RegMR(make([]byte, 8), 0)
	wantErr(t, err, ErrInvalidArgument, "pd")
	_, err = nilPD.CreateQP(QPInitAttr{})
	wantErr(t, err, ErrInvalidArgument, "pd")
	_, err = nilPD.CreateSRQ(SRQInitAttr{MaxWR: 1})
	wantErr(t, err, ErrInvalidArgument, "pd")
	_, err = nilPD.CreateAH(remoteAV())
	wantErr(t, err, ErrInvalidArgument, "pd")
}

func TestAH(t *testing.T) {
	d := newDevice(t)
	pd := mustPD(t, d)
	ah, err := pd.CreateAH(remoteAV())
	if err != nil {
		t.Fatal(err)
	}
	if ah.PD() != pd || ah.Attr() != remoteAV() {
		t.Error("AH accessors")
	}
	wantErr(t, ah.Destroy(), nil, "")
	wantErr(t, ah.Destroy(), ErrClosed, "ah")

	mod := func(f func(*AddressVector)) AddressVector {
		av := remoteAV()
		f(&av)
		return av
	}
	bad := []struct {
		name  string
		av    AddressVector
		field string
	}{
		{"port 2", mod(func(a *AddressVector) { a.PortNum = 2 }), "ah_attr.port_num"},
		{"port 0", mod(func(a *AddressVector) { a.PortNum = 0 }), "ah_attr.port_num"},
		{"no GRH", mod(func(a *AddressVector) { a.IsGlobal = false }), "ah_attr.is_global"},
		{"sgid index 2", mod(func(a *AddressVector) { a.SGIDIndex = 2 }), "ah_attr.sgid_index"},
		{"sgid index -1", mod(func(a *AddressVector) { a.SGIDIndex = -1 }), "ah_attr.sgid_index"},
		{"zero dgid", mod(func(a *AddressVector) { a.DGID = GID{} }), "ah_attr.dgid"},
		{"IPv6 dgid from IPv4 sgid", mod(func(a *AddressVector) { a.DGID = GIDFromAddr(netip.MustParseAddr("2001:db8::1")) }), "ah_attr.dgid"},
		{"IPv4 dgid from link-local sgid", mod(func(a *AddressVector) { a.SGIDIndex = 0 }), "ah_attr.dgid"},
		{"flow label", mod(func(a *AddressVector) { a.FlowLabel = 1 << 20 }), "ah_attr.flow_label"},
		{"sl", mod(func(a *AddressVector) { a.SL = 16 }), "ah_attr.sl"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			_, err := pd.CreateAH(b.av)
			wantErr(t, err, ErrInvalidArgument, b.field)
		})
	}
	// An IPv6 destination from the link-local source GID is fine.
	ok := mod(func(a *AddressVector) {
		a.SGIDIndex = 0
		a.DGID = GIDFromAddr(netip.MustParseAddr("fe80::1"))
	})
	if _, err := pd.CreateAH(ok); err != nil {
		t.Errorf("link-local AH: %v", err)
	}
}
