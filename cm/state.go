package cm

import (
	"net/netip"
	"sync"

	"github.com/goroce/goroce/internal/gsi"
	"github.com/goroce/goroce/verbs"
)

// state is the process's connection manager: the agents (one per open
// device), the port bindings of every port space, and every ID. One lock
// guards it all: connection setup is not the data path, and one lock keeps
// the IB CM's state and rdma_cm's in step. Lock order: state.mu, then an
// EventChannel's mu, then the verbs objects' locks. verbs never calls into
// this package with a lock of its own held, except through the agents'
// non-blocking receive callbacks.
var state struct {
	mu     sync.Mutex
	agents map[gsi.Port]*agent
	binds  map[bindKey]*bindList
	ids    int // live IDs, for tests

	// toDispatch lists the handler channels that got events under mu;
	// unlock dispatches them.
	toDispatch []*EventChannel
}

func init() {
	state.agents = make(map[gsi.Port]*agent)
	state.binds = make(map[bindKey]*bindList)
	// Every goroce device of the process gets a CM agent when it opens
	// and loses it when it closes, as a kernel runs ib_cm on every RDMA
	// device: a REQ to a port nobody listens on is refused, not ignored.
	gsi.Watch(portChanged)
}

// portChanged is the registry's watcher: it attaches an agent to a device
// that opens and removes it from one that closes.
func portChanged(p gsi.Port, up bool) {
	if up {
		a := newAgent(p)
		lock()
		state.agents[p] = a
		unlock()
		a.start()
		return
	}
	lock()
	a := state.agents[p]
	delete(state.agents, p)
	if a != nil {
		a.removeLocked()
	}
	unlock()
	if a != nil {
		a.stopAndWait()
	}
}

// lock takes state.mu.
func lock() { state.mu.Lock() }

// unlock releases state.mu, then hands the events posted meanwhile to
// the handler channels, outside the lock.
func unlock() {
	chs := state.toDispatch
	state.toDispatch = nil
	state.mu.Unlock()
	for i, ch := range chs {
		if i > 0 && ch == chs[i-1] {
			continue
		}
		ch.dispatch()
	}
}

// agentFor returns the agent of the device bound to addr, or nil. The
// caller holds state.mu.
func agentFor(addr netip.Addr) *agent {
	p := gsi.Lookup(addr)
	if p == nil {
		return nil
	}
	return state.agents[p]
}

// peerUDPPort returns the UDP port of the device at addr: a goroce device
// of this process may use another than 4791, every other RoCE peer
// listens on 4791.
func peerUDPPort(addr netip.Addr) uint16 {
	if p := gsi.Lookup(addr); p != nil {
		return p.UDPPort()
	}
	return verbs.DefaultUDPPort
}
