package rdmatest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/racesync"
	"github.com/goroce/goroce/verbs"
)

// Cross mode runs a test in two processes at once, one end of each
// connection in each, so that the ends can be on different backends: a
// goroce device in one process and a kernel RDMA device
// (GOROCE_TEST_BACKEND=hw:NAME) in the other, or goroce devices in two
// processes. Both processes run the same test binary with the same
// -test.run pattern, hence the same tests in the same order, and meet over
// one TCP connection, as perftest's processes exchange QP attributes: each
// step of a test is one JSON line each way (QP numbers, GIDs, keys, "the
// receive is posted", "the request completed"), and every byte of the
// test's data moves by RDMA. test/hw/cross.sh runs verbs' TestCross* this
// way between the host, in the network namespace the rxe VM is bridged
// into, and rxe0 in the VM.

// CrossEnv names the environment variable that puts a test process in
// cross mode: "listen ADDR:PORT" waits for the peer process on that TCP
// address, "dial ADDR:PORT" connects to it, and "dial ADDR:PORT from
// LOCAL" connects from the address LOCAL. A goroce device of cross mode
// is opened on the local address of that connection (so the listener's
// ADDR is its devices' too). Unset, the cross tests skip.
const CrossEnv = "GOROCE_TEST_CROSS"

// crossTimeout bounds every wait for the peer process: for it to start
// and connect, and for each of its steps. A step may wait for the peer's
// RDMA completions, each bounded by testkit.Timeout, and the peer may run
// in an emulated VM.
const crossTimeout = 2 * time.Minute

// crossMsg is one line between the processes.
type crossMsg struct {
	Step string          `json:"step"`
	End  string          `json:"end,omitempty"` // on step "end": "pass", "fail" or "skip"
	V    json.RawMessage `json:"v,omitempty"`
}

// crossLink is the connection to the peer process, shared by every
// cross test of the process.
type crossLink struct {
	conn     net.Conn
	r        *bufio.Reader
	listener bool
	local    netip.Addr // the address this side's goroce devices open on
	// The subtest names of the two directions, the listener's backend
	// first: "soft", "hw:NAME".
	listenerName, dialerName string
	broken                   error // an I/O error: no test can use the link any more
}

var cross struct {
	once sync.Once
	link *crossLink
	err  error
}

// backendName names this process's backend for the peer.
func backendName() string {
	if hw := Hardware(); hw != "" {
		return "hw:" + hw
	}
	return "soft"
}

// SkipUnlessCross skips the test unless CrossEnv puts the process in
// cross mode, for a test that runs its cases through CrossRun.
func SkipUnlessCross(t testing.TB) {
	t.Helper()
	if os.Getenv(CrossEnv) == "" {
		t.Skipf("%s is unset: cross mode runs in two processes (test/hw/cross.sh)", CrossEnv)
	}
}

// crossLinkFor returns the process's link to its peer, connecting on the
// first call; it skips the test when CrossEnv is unset.
func crossLinkFor(t testing.TB) *crossLink {
	t.Helper()
	SkipUnlessCross(t)
	spec := os.Getenv(CrossEnv)
	cross.once.Do(func() { cross.link, cross.err = dialCross(spec) })
	if cross.err != nil {
		t.Fatalf("%s=%q: %v", CrossEnv, spec, cross.err)
	}
	if cross.link.broken != nil {
		t.Fatalf("the link to the peer process broke in an earlier test: %v", cross.link.broken)
	}
	return cross.link
}

// dialCross parses spec (see CrossEnv), connects and exchanges the
// backends' names.
func dialCross(spec string) (*crossLink, error) {
	f := strings.Fields(spec)
	var conn net.Conn
	switch {
	case len(f) == 2 && f[0] == "listen":
		ln, err := net.Listen("tcp", f[1])
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		if err := ln.(*net.TCPListener).SetDeadline(time.Now().Add(crossTimeout)); err != nil {
			return nil, err
		}
		if conn, err = ln.Accept(); err != nil {
			return nil, fmt.Errorf("waiting for the peer process: %w", err)
		}
	case (len(f) == 2 || len(f) == 4 && f[2] == "from") && f[0] == "dial":
		var d net.Dialer
		if len(f) == 4 {
			a, err := netip.ParseAddr(f[3])
			if err != nil {
				return nil, fmt.Errorf("from address: %w", err)
			}
			d.LocalAddr = &net.TCPAddr{IP: a.AsSlice()}
		}
		// The peer may not listen yet: try until crossTimeout.
		deadline := time.Now().Add(crossTimeout)
		for {
			var err error
			if conn, err = d.Dial("tcp", f[1]); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("connecting to the peer process: %w", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	default:
		return nil, fmt.Errorf(`want "listen ADDR:PORT", "dial ADDR:PORT" or "dial ADDR:PORT from ADDR"`)
	}
	l := &crossLink{conn: conn, r: bufio.NewReader(conn), listener: f[0] == "listen"}
	ap, err := netip.ParseAddrPort(conn.LocalAddr().String())
	if err != nil {
		conn.Close()
		return nil, err
	}
	l.local = ap.Addr().Unmap()
	me := backendName()
	if err := l.write(crossMsg{Step: "hello", V: mustJSON(me)}); err != nil {
		conn.Close()
		return nil, err
	}
	m, err := l.read()
	if err != nil {
		conn.Close()
		return nil, err
	}
	var peer string
	if m.Step != "hello" || json.Unmarshal(m.V, &peer) != nil {
		conn.Close()
		return nil, fmt.Errorf("the peer's first line is %+v, want its hello", m)
	}
	if peer == me {
		// Same backend at both ends: the names say which process.
		me, peer = "listener-"+me, "dialer-"+peer
		if !l.listener {
			me, peer = peer, me
		}
	}
	l.listenerName, l.dialerName = me, peer
	if !l.listener {
		l.listenerName, l.dialerName = peer, me
	}
	return l, nil
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only the package's own types are marshalled
	}
	return b
}

// write sends m. The peer's steps order this process's memory with the
// device's as completions do (the peer's device placed or read it before
// the peer said so): racesync shows that edge to the race detector, on
// both sides of every line, as verbs does at each poll.
func (l *crossLink) write(m crossMsg) error {
	racesync.Sync()
	b := append(mustJSON(m), '\n')
	if err := l.conn.SetWriteDeadline(time.Now().Add(crossTimeout)); err != nil {
		return err
	}
	if _, err := l.conn.Write(b); err != nil {
		l.broken = err
		return err
	}
	return nil
}

func (l *crossLink) read() (crossMsg, error) {
	var m crossMsg
	if err := l.conn.SetReadDeadline(time.Now().Add(crossTimeout)); err != nil {
		return m, err
	}
	line, err := l.r.ReadBytes('\n')
	racesync.Sync()
	if err != nil {
		l.broken = fmt.Errorf("reading from the peer process: %w", err)
		return m, l.broken
	}
	if err := json.Unmarshal(line, &m); err != nil {
		l.broken = fmt.Errorf("the peer's line %q: %w", line, err)
		return m, l.broken
	}
	return m, nil
}

// Cross is one direction of a cross test as one process runs it: this
// process's end is the requester (it posts the work requests) or the
// responder.
type Cross struct {
	t         *testing.T
	l         *crossLink
	Requester bool
	// Local and Remote name the backends of this process and of the peer
	// ("soft", "hw:rxe0").
	Local, Remote string
	peerEnd       string // how the peer ended the test, once it said
}

// CrossRun runs body twice, as subtests named "REQUESTER→RESPONDER" after
// the backends: once with the listening process as the requester, once
// with the dialing one. The peer process runs the same body at the same
// time with the other role. It skips when CrossEnv is unset.
func CrossRun(t *testing.T, body func(t *testing.T, x *Cross)) {
	t.Helper()
	l := crossLinkFor(t)
	// Both processes must be at the same test.
	x := &Cross{t: t, l: l}
	var name string
	x.Exchange("test", t.Name(), &name)
	if name != t.Name() {
		l.broken = fmt.Errorf("this process ran %s where the peer ran %s", t.Name(), name)
		t.Fatal(l.broken)
	}
	for _, listenerRequests := range []bool{true, false} {
		req, resp := l.listenerName, l.dialerName
		if !listenerRequests {
			req, resp = resp, req
		}
		t.Run(req+"→"+resp, func(t *testing.T) {
			x := &Cross{t: t, l: l, Requester: l.listener == listenerRequests, Local: l.dialerName, Remote: l.listenerName}
			if l.listener {
				x.Local, x.Remote = x.Remote, x.Local
			}
			t.Cleanup(x.end)
			body(t, x)
		})
	}
}

// end tells the peer how this side ended the test and reads on to the
// peer's end, skipping what it sent for steps this side did not reach;
// if the peer failed, so does this side, pointing at the peer's output.
func (x *Cross) end() {
	if x.l.broken != nil {
		return
	}
	state := "pass"
	switch {
	case x.t.Failed():
		state = "fail"
	case x.t.Skipped():
		state = "skip"
	}
	if err := x.l.write(crossMsg{Step: "end", End: state}); err != nil {
		x.t.Errorf("telling the peer process the test ended: %v", err)
		return
	}
	for x.peerEnd == "" {
		m, err := x.l.read()
		if err != nil {
			x.t.Error(err)
			return
		}
		if m.Step == "end" {
			x.peerEnd = m.End
		}
	}
	if x.peerEnd == "fail" && state != "fail" {
		x.t.Errorf("the peer process (%s) failed this test: see its output", x.Remote)
	}
}

// Tell sends v to the peer as step.
func (x *Cross) Tell(step string, v any) {
	x.t.Helper()
	if err := x.l.write(crossMsg{Step: step, V: mustJSON(v)}); err != nil {
		x.t.Fatalf("telling the peer %s: %v", step, err)
	}
}

// Hear waits for the peer's step and decodes its value into v (nil: the
// step carries none). If the peer ended the test instead, this side
// skips (the peer skipped) or fails.
func (x *Cross) Hear(step string, v any) {
	x.t.Helper()
	m, err := x.l.read()
	if err != nil {
		x.t.Fatalf("waiting for the peer's %s: %v", step, err)
	}
	if m.Step == "end" {
		x.peerEnd = m.End
		if m.End == "skip" {
			x.t.Skipf("the peer process (%s) skipped this test at this side's step %s: see its output", x.Remote, step)
		}
		x.t.Fatalf("the peer process (%s) ended this test (%s) where this side waits for its %s", x.Remote, m.End, step)
	}
	if m.Step != step {
		x.t.Fatalf("the peer process is at step %s where this side waits for %s", m.Step, step)
	}
	if v != nil {
		if err := json.Unmarshal(m.V, v); err != nil {
			x.t.Fatalf("the peer's %s %s: %v", step, m.V, err)
		}
	}
}

// Exchange sends mine as step and waits for the peer's, decoded into
// theirs.
func (x *Cross) Exchange(step string, mine, theirs any) {
	x.t.Helper()
	x.Tell(step, mine)
	x.Hear(step, theirs)
}

// Sync waits until the peer reaches step too.
func (x *Cross) Sync(step string) {
	x.t.Helper()
	x.Exchange(step, nil, nil)
}

// Remote is what the peer tells of its end: its QP, and the buffer its
// region covers.
type Remote struct {
	GID  verbs.GID
	QPN  uint32
	PSN  uint32 // the first PSN it sends
	Addr uint64 // the region's IOVA
	RKey uint32
	Len  int
}

// CrossEnd is an End of this process whose QP is in RTS toward the
// peer's.
type CrossEnd struct {
	*End
	Peer Remote
	AH   *verbs.AH // UD: toward the peer's device
}

// Addr is the address of this side of the link to the peer: a goroce
// device of cross mode is opened on it, and the rxe VM's is rxe0's.
func (x *Cross) Addr() netip.Addr { return x.l.local }

// Open opens this side's End with o (a goroce device on Addr, or the
// hardware device), its QP in RESET, for a test that connects it
// otherwise than Connect does (through the CM).
func (x *Cross) Open(o EndOptions) *End {
	x.t.Helper()
	if Hardware() == "" && !o.Addr.IsValid() {
		o.Addr = x.l.local
	}
	return NewEnd(x.t, o)
}

// Connect opens this side's End with o (a goroce device on the address of
// the link to the peer, or the hardware device), exchanges the QPs'
// attributes and the regions with the peer and brings the QP to RTS with
// DefaultLink: connected to the peer's for RC and UC; for UD with Q_Key
// UDQKey and an address handle toward the peer's device. It returns when
// both QPs are in RTS.
func (x *Cross) Connect(o EndOptions) *CrossEnd {
	x.t.Helper()
	if Hardware() == "" && !o.Addr.IsValid() {
		o.Addr = x.l.local
	}
	e := &CrossEnd{End: NewEnd(x.t, o)}
	psn := uint32(PSNB)
	if x.l.listener {
		psn = PSNA
	}
	p := PeerOf(x.t, e.QP, psn)
	me := Remote{GID: p.GID, QPN: p.QPN, PSN: psn, Addr: e.MR.IOVA(), RKey: e.MR.RKey(), Len: len(e.Buf)}
	x.Exchange("qp", me, &e.Peer)
	if e.QP.Type() == verbs.QPTypeUD {
		LinkQP(x.t, e.QP, DefaultLink(), psn, Peer{})
		ah, err := e.PD.CreateAH(verbs.AddressVector{DGID: e.Peer.GID, SGIDIndex: GIDIndex(e.Dev),
			HopLimit: 64, IsGlobal: true, PortNum: 1})
		if err != nil {
			x.t.Fatalf("CreateAH toward %v: %v", e.Peer.GID, err)
		}
		e.AH = ah
	} else {
		LinkQP(x.t, e.QP, DefaultLink(), psn, Peer{GID: e.Peer.GID, QPN: e.Peer.QPN, PSN: e.Peer.PSN})
	}
	x.Sync("rts")
	return e
}
