package verbs_test

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

// Ports rdma-core's tests/test_pd.py: alloc, dealloc, multiple PDs, double
// destroy, and dealloc of a PD still in use.

func TestPDAllocDealloc(t *testing.T) {
	d := newDevice(t)
	pds := make([]*verbs.PD, 10)
	for i := range pds {
		pds[i] = rdmatest.PD(t, d)
		if pds[i].Device() != d {
			t.Fatal("PD.Device is not its device")
		}
	}
	for _, pd := range pds {
		if err := pd.Dealloc(); err != nil {
			t.Fatalf("Dealloc: %v", err)
		}
	}
	rdmatest.WantError(t, pds[0].Dealloc(), verbs.ErrClosed, "pd")
}

func TestPDDeallocBusy(t *testing.T) {
	d := newDevice(t)
	cq := rdmatest.CQ(t, d, 4)
	users := []struct {
		name   string
		create func(pd *verbs.PD) (destroy func() error)
	}{
		{"MR", func(pd *verbs.PD) func() error { return mustMR(t, pd, 8, 0).Dereg }},
		{"QP", func(pd *verbs.PD) func() error { return mustQP(t, pd, verbs.QPTypeRC, cq).Destroy }},
		{"SRQ", func(pd *verbs.PD) func() error {
			srq, err := pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 2})
			if err != nil {
				t.Fatal(err)
			}
			return srq.Destroy
		}},
		{"AH", func(pd *verbs.PD) func() error {
			ah, err := pd.CreateAH(remoteAV())
			if err != nil {
				t.Fatal(err)
			}
			return ah.Destroy
		}},
	}
	for _, u := range users {
		t.Run(u.name, func(t *testing.T) {
			pd := rdmatest.PD(t, d)
			destroy := u.create(pd)
			rdmatest.WantError(t, pd.Dealloc(), verbs.ErrBusy, "pd")
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
	cq := rdmatest.CQ(t, d, 4)
	pd := rdmatest.PD(t, d)
	if err := pd.Dealloc(); err != nil {
		t.Fatal(err)
	}
	_, err := pd.RegMR(make([]byte, 8), 0)
	rdmatest.WantError(t, err, verbs.ErrClosed, "pd")
	_, err = pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq})
	rdmatest.WantError(t, err, verbs.ErrClosed, "pd")
	_, err = pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: 1})
	rdmatest.WantError(t, err, verbs.ErrClosed, "pd")
	_, err = pd.CreateAH(remoteAV())
	rdmatest.WantError(t, err, verbs.ErrClosed, "pd")

	var nilPD *verbs.PD
	_, err = nilPD.RegMR(make([]byte, 8), 0)
	rdmatest.WantError(t, err, verbs.ErrInvalidArgument, "pd")
	_, err = nilPD.CreateQP(verbs.QPInitAttr{})
	rdmatest.WantError(t, err, verbs.ErrInvalidArgument, "pd")
	_, err = nilPD.CreateSRQ(verbs.SRQInitAttr{MaxWR: 1})
	rdmatest.WantError(t, err, verbs.ErrInvalidArgument, "pd")
	_, err = nilPD.CreateAH(remoteAV())
	rdmatest.WantError(t, err, verbs.ErrInvalidArgument, "pd")
}

func TestAH(t *testing.T) {
	d := newDevice(t)
	pd := rdmatest.PD(t, d)
	ah, err := pd.CreateAH(remoteAV())
	if err != nil {
		t.Fatal(err)
	}
	if ah.PD() != pd || ah.Attr() != remoteAV() {
		t.Error("AH accessors")
	}
	rdmatest.WantError(t, ah.Destroy(), nil, "")
	rdmatest.WantError(t, ah.Destroy(), verbs.ErrClosed, "ah")

	mod := func(f func(*verbs.AddressVector)) verbs.AddressVector {
		av := remoteAV()
		f(&av)
		return av
	}
	bad := []struct {
		name  string
		av    verbs.AddressVector
		field string
	}{
		{"port 2", mod(func(a *verbs.AddressVector) { a.PortNum = 2 }), "ah_attr.port_num"},
		{"port 0", mod(func(a *verbs.AddressVector) { a.PortNum = 0 }), "ah_attr.port_num"},
		{"no GRH", mod(func(a *verbs.AddressVector) { a.IsGlobal = false }), "ah_attr.is_global"},
		{"sgid index 2", mod(func(a *verbs.AddressVector) { a.SGIDIndex = 2 }), "ah_attr.sgid_index"},
		{"sgid index -1", mod(func(a *verbs.AddressVector) { a.SGIDIndex = -1 }), "ah_attr.sgid_index"},
		{"zero dgid", mod(func(a *verbs.AddressVector) { a.DGID = verbs.GID{} }), "ah_attr.dgid"},
		{"IPv6 dgid from IPv4 sgid", mod(func(a *verbs.AddressVector) { a.DGID = verbs.GIDFromAddr(netip.MustParseAddr("2001:db8::1")) }), "ah_attr.dgid"},
		{"IPv4 dgid from link-local sgid", mod(func(a *verbs.AddressVector) { a.SGIDIndex = 0 }), "ah_attr.dgid"},
		{"flow label", mod(func(a *verbs.AddressVector) { a.FlowLabel = 1 << 20 }), "ah_attr.flow_label"},
		{"sl", mod(func(a *verbs.AddressVector) { a.SL = 16 }), "ah_attr.sl"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			_, err := pd.CreateAH(b.av)
			rdmatest.WantError(t, err, verbs.ErrInvalidArgument, b.field)
		})
	}
	// An IPv6 destination from the link-local source GID is fine.
	ok := mod(func(a *verbs.AddressVector) {
		a.SGIDIndex = 0
		a.DGID = verbs.GIDFromAddr(netip.MustParseAddr("fe80::1"))
	})
	if _, err := pd.CreateAH(ok); err != nil {
		t.Errorf("link-local AH: %v", err)
	}
}
