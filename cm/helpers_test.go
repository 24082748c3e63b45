package cm

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/gsi"
	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// The tests run devices on loopback addresses of the test process's own
// (testkit.Addr), one test at a time.

// testTimeout bounds every exchange that is expected to succeed; it only
// turns a bug into a failure instead of a hung test.
const testTimeout = testkit.Timeout

// checkLeaks fails the test if goroutines started during it are still
// running at its end (testkit.CheckLeaks), or IDs or agents are left.
// Call it first, so that its cleanups run last (after the devices close).
func checkLeaks(t *testing.T) {
	t.Helper()
	testkit.CheckLeaks(t)
	lock()
	idsBefore := state.ids
	unlock()
	t.Cleanup(func() {
		testkit.WaitFor(t, "the test's IDs and agents gone", func() bool {
			lock()
			defer unlock()
			return state.ids <= idsBefore && len(state.agents) == 0
		})
	})
}

// host is one device with the objects a QP needs.
type host struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	buf []byte
	mr  *verbs.MR
	// ip is the address of a kernel device's host (the device has
	// several); a goroce device's is its own.
	ip netip.Addr
}

// addr returns the host's address.
func (h *host) addr() netip.Addr {
	if h.ip.IsValid() {
		return h.ip
	}
	return h.dev.Addr()
}

// newHost opens a device on testkit.Addr(i) for the test.
func newHost(t *testing.T, i int) *host {
	t.Helper()
	return newHostConfig(t, verbs.DeviceConfig{Addr: testkit.Addr(i)})
}

func newHostConfig(t *testing.T, cfg verbs.DeviceConfig) *host {
	t.Helper()
	if cfg.ReceiveQueues == 0 {
		cfg.ReceiveQueues = rdmatest.ReceiveQueues(t) // GOROCE_TEST_RECEIVE_QUEUES
	}
	dev, err := verbs.Open(cfg)
	if err != nil {
		t.Fatalf("verbs.Open(%v): %v", cfg.Addr, err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	h := &host{dev: dev, buf: make([]byte, 1<<16)}
	if h.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if h.cq, err = dev.CreateCQ(256, nil, 0); err != nil {
		t.Fatal(err)
	}
	h.mr, err = h.pd.RegMR(h.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// qp creates a QP of type typ in RESET.
func (h *host) qp(t *testing.T, typ verbs.QPType) *verbs.QP {
	t.Helper()
	qp, err := h.pd.CreateQP(verbs.QPInitAttr{
		QPType: typ, SendCQ: h.cq, RecvCQ: h.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1},
	})
	if err != nil {
		t.Fatalf("CreateQP(%v): %v", typ, err)
	}
	return qp
}

// at returns h's address with port, for Listen and Dial.
func (h *host) at(port uint16) string { return netipString(h.dev, port) }

func netipString(dev *verbs.Device, port uint16) string {
	return netip.AddrPortFrom(dev.Addr(), port).String()
}

// records returns the number of the Manager's records on dev's agent.
func records(dev *verbs.Device) int {
	lock()
	defer unlock()
	for p, a := range state.agents {
		if p.Device() == dev {
			return a.mgr.Len()
		}
	}
	return -1
}

// agentOf returns dev's agent.
func agentOf(t *testing.T, dev *verbs.Device) *agent {
	t.Helper()
	lock()
	defer unlock()
	a := state.agents[gsi.Lookup(dev.Addr())]
	if a == nil {
		t.Fatalf("no agent for %v", dev.Addr())
	}
	return a
}
