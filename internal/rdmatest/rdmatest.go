// Package rdmatest builds what goroce's tests run RDMA on, as
// net/http/httptest builds servers: devices on loopback addresses of the
// test process's own, the objects a QP needs, QPs of any transport moved to
// RTS toward each other, and waits for their completions, each failing the
// test with a message that says what did not happen.
//
// Every object is destroyed with its device at the end of the test. The
// device-free part of the harness (addresses, WaitFor, leak checks, error
// matching) is in testkit, for packages that verbs imports.
//
// With GOROCE_TEST_BACKEND=hw:NAME in the environment (and a binary built
// with -tags goroce_ibverbs), OpenDevice and the ends open the kernel RDMA
// device NAME (verbs.OpenHardware) instead of goroce devices: every end
// is on that one device, and QPs connected to each other meet through it
// (on rxe, through the kernel's loopback). A test that needs what only a
// goroce device has (a DeviceConfig, fault injection) skips, saying so;
// others call SkipOnHardware with their reason.
package rdmatest

import (
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// OpenDevice opens a device with cfg (Addr defaults to testkit.Addr(1))
// and closes it at the end of the test.
func OpenDevice(t testing.TB, cfg verbs.DeviceConfig) *verbs.Device {
	t.Helper()
	return openWith(t, nil, cfg)
}

// BackendEnv names the environment variable that selects the backend the
// tests run on: unset or "soft" for goroce devices, "hw:NAME" for the
// kernel RDMA device NAME.
const BackendEnv = "GOROCE_TEST_BACKEND"

// Hardware returns the name of the RDMA device the tests run on, or ""
// when they run on goroce devices.
func Hardware() string {
	name, ok := strings.CutPrefix(os.Getenv(BackendEnv), "hw:")
	if !ok {
		return ""
	}
	return name
}

// SkipOnHardware skips the test when it runs on a hardware device, with
// why it cannot apply there.
func SkipOnHardware(t testing.TB, why string) {
	t.Helper()
	if hw := Hardware(); hw != "" {
		t.Skipf("%s=hw:%s: %s", BackendEnv, hw, why)
	}
}

// openHardware opens the device of Hardware, unless the test asks for
// what only a goroce device has.
func openHardware(t testing.TB, cfg verbs.DeviceConfig, faults bool) *verbs.Device {
	t.Helper()
	if faults {
		SkipOnHardware(t, "the test injects faults into a goroce device")
	}
	cfg.Addr, cfg.Name = netip.Addr{}, ""
	if !reflect.ValueOf(cfg).IsZero() {
		SkipOnHardware(t, fmt.Sprintf("the test configures a goroce device (%+v)", cfg))
	}
	d, err := verbs.OpenHardware(Hardware())
	if err != nil {
		t.Fatalf("opening the RDMA device %q: %v", Hardware(), err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// openWith opens a device with open (nil: verbs.Open), or the hardware
// device (openHardware).
func openWith(t testing.TB, open func(verbs.DeviceConfig) (*verbs.Device, error), cfg verbs.DeviceConfig) *verbs.Device {
	t.Helper()
	if Hardware() != "" {
		return openHardware(t, cfg, open != nil)
	}
	if open == nil {
		open = verbs.Open
	}
	if !cfg.Addr.IsValid() {
		cfg.Addr = testkit.Addr(1)
	}
	if cfg.ReceiveQueues == 0 {
		cfg.ReceiveQueues = ReceiveQueues(t)
	}
	d, err := open(cfg)
	if err != nil {
		t.Fatalf("opening a device on %v: %v", cfg.Addr, err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// ReceiveQueuesEnv names the environment variable that gives the devices
// the harness opens DeviceConfig.ReceiveQueues unless their configuration
// sets it: GOROCE_TEST_RECEIVE_QUEUES=4 go test ./verbs runs every test
// that opens its devices here on four receive queues.
const ReceiveQueuesEnv = "GOROCE_TEST_RECEIVE_QUEUES"

// ReceiveQueues reads ReceiveQueuesEnv: 0 (the default) when unset. The
// harness applies it to the devices it opens; tests that open their own
// apply it themselves.
func ReceiveQueues(t testing.TB) int {
	v := os.Getenv(ReceiveQueuesEnv)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", ReceiveQueuesEnv, v, err)
	}
	return n
}

// PD allocates a protection domain on d.
func PD(t testing.TB, d *verbs.Device) *verbs.PD {
	t.Helper()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	return pd
}

// CQ creates a CQ of cqe entries on d, without a completion channel.
func CQ(t testing.TB, d *verbs.Device, cqe int) *verbs.CQ {
	t.Helper()
	cq, err := d.CreateCQ(cqe, nil, 0)
	if err != nil {
		t.Fatalf("CreateCQ(%d): %v", cqe, err)
	}
	return cq
}

// MR registers buf with access in pd.
func MR(t testing.TB, pd *verbs.PD, buf []byte, access verbs.AccessFlags) *verbs.MR {
	t.Helper()
	mr, err := pd.RegMR(buf, access)
	if err != nil {
		t.Fatalf("RegMR(%d bytes, %v): %v", len(buf), access, err)
	}
	return mr
}

// QP creates a QP in pd.
func QP(t testing.TB, pd *verbs.PD, init verbs.QPInitAttr) *verbs.QP {
	t.Helper()
	qp, err := pd.CreateQP(init)
	if err != nil {
		t.Fatalf("CreateQP(%v): %v", init.QPType, err)
	}
	return qp
}

// RCAccess is every right an RC responder can grant: what ends register
// their buffers with and give their QPs unless told otherwise.
const RCAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// End is one side of a connection: a device with a PD, a CQ (both queues
// of the QP), a registered buffer and a QP, in RESET until linked.
type End struct {
	Dev *verbs.Device
	PD  *verbs.PD
	CQ  *verbs.CQ
	SRQ *verbs.SRQ // nil unless EndOptions.SRQ asked for one
	Buf []byte
	MR  *verbs.MR
	QP  *verbs.QP
}

// EndOptions shape an End. The zero value is an RC QP with 64 send and
// receive work requests of 4 SGEs and 64 bytes inline, a CQ of 512 entries
// and 64 KiB registered with RCAccess, on a device at testkit.Addr(1).
type EndOptions struct {
	Addr   netip.Addr         // the device's address; default testkit.Addr(1), or Device.Addr
	Device verbs.DeviceConfig // the rest of the device's configuration
	// Open opens the device; default verbs.Open. Tests of fault
	// injection pass verbs.OpenWithFaults with their faults.
	Open func(verbs.DeviceConfig) (*verbs.Device, error)

	Type     verbs.QPType      // default RC
	Cap      verbs.QPCap       // the QP's capacities (default above)
	SQSigAll bool              // every send request completes
	CQE      int               // CQ entries; default 512
	Channel  bool              // give the CQ a completion channel
	BufSize  int               // registered buffer; default 64 KiB
	MRAccess verbs.AccessFlags // the buffer's rights; default RCAccess
	// SRQ, if not nil, gives the QP a shared receive queue created with
	// these attributes in the End's PD.
	SRQ *verbs.SRQInitAttr
}

// DefaultCap are an End's QP capacities unless EndOptions.Cap says
// otherwise.
var DefaultCap = verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}

// NewEnd opens a device with a PD, a CQ, a registered buffer and a QP in
// RESET, all closed with the device at the end of the test.
func NewEnd(t testing.TB, o EndOptions) *End {
	t.Helper()
	cfg := o.Device
	if o.Addr.IsValid() {
		cfg.Addr = o.Addr
	}
	e := &End{Dev: openWith(t, o.Open, cfg)}
	e.PD = PD(t, e.Dev)
	var ch *verbs.CompChannel
	if o.Channel {
		var err error
		if ch, err = e.Dev.CreateCompChannel(); err != nil {
			t.Fatalf("CreateCompChannel: %v", err)
		}
	}
	cqe := o.CQE
	if cqe == 0 {
		cqe = 512
	}
	cq, err := e.Dev.CreateCQ(cqe, ch, 0)
	if err != nil {
		t.Fatalf("CreateCQ(%d): %v", cqe, err)
	}
	e.CQ = cq
	size, access := o.BufSize, o.MRAccess
	if size == 0 {
		size = 1 << 16
	}
	if access == 0 {
		access = RCAccess
	}
	e.Buf = make([]byte, size)
	e.MR = MR(t, e.PD, e.Buf, access)
	if o.SRQ != nil {
		if e.SRQ, err = e.PD.CreateSRQ(*o.SRQ); err != nil {
			t.Fatalf("CreateSRQ(%+v): %v", *o.SRQ, err)
		}
	}
	c := o.Cap
	if c == (verbs.QPCap{}) {
		c = DefaultCap
	}
	typ := o.Type
	if typ == 0 {
		typ = verbs.QPTypeRC
	}
	e.QP = QP(t, e.PD, verbs.QPInitAttr{QPType: typ, SendCQ: cq, RecvCQ: cq, SRQ: e.SRQ, Cap: c, SQSigAll: o.SQSigAll})
	return e
}

// Link are the attributes a QP is given on its way from RESET to RTS; a
// transport takes those it has (see Transitions).
type Link struct {
	MTU    verbs.MTU         // RC, UC: path MTU
	Access verbs.AccessFlags // RC, UC: the QP's access flags, what its responder allows
	QKey   uint32            // UD: the QP's Q_Key

	// RC only.
	Timeout         uint8 // local ACK timeout code: 4.096 µs × 2^Timeout; 0 = never retransmit
	RetryCnt        uint8
	RNRRetry        uint8
	MinRNRTimer     uint8
	MaxRdAtomic     int // initiator depth
	MaxDestRdAtomic int // responder resources
	// SelectiveRepeat: goroce's selective repeat (QPAttr.SelectiveRepeat);
	// both ends must have it.
	SelectiveRepeat bool
}

// UDQKey is the Q_Key of rdma-core's tools (ibv_ud_pingpong, pyverbs).
const UDQKey = 0x11111111

// DefaultLink is what rdma-core's tests use, with a 1024-byte path MTU,
// except for the local ACK timeout: 18 (1.07 s, rdma-core's 14 is 67 ms).
// Nothing is lost on loopback, so the timeout only bounds how long a
// receive goroutine may wait for a CPU; under -race on two loaded cores
// that exceeded 14's (retry_cnt+1) × 67 ms = 0.54 s, and a test that is not
// about retries ended in RETRY_EXC_ERR. Tests of timeouts set their own.
func DefaultLink() Link {
	return Link{MTU: verbs.MTU1024, Access: RCAccess, QKey: UDQKey, Timeout: 18, RetryCnt: 7, RNRRetry: 7,
		MinRNRTimer: 1, MaxRdAtomic: 16, MaxDestRdAtomic: 16}
}

// Peer is what a connected QP knows of the other end.
type Peer struct {
	GID verbs.GID // the GID of its device (index 1)
	QPN uint32
	PSN uint32 // the first PSN it sends: this QP's rq_psn
}

// GIDIndex is the index of the GID QPs of d send from: 1 on a goroce
// device (the GID of its address), and on a hardware device the first
// RoCE v2 GID of an IPv4 address, as perftest's -x picks one (rxe lists
// every address of its interface, RoCE v1 and v2, link-local IPv6 first).
func GIDIndex(d *verbs.Device) int {
	if Hardware() == "" {
		return 1
	}
	for _, e := range d.GIDTable() {
		if e.Type == verbs.GIDTypeRoCEv2 && !e.GID.IsZero() && e.GID.Addr().Is4() {
			return e.Index
		}
	}
	return 1
}

// ConnectedRecv returns a receive completion of a connected (RC or UC) QP
// whose peer is peerQPN as a goroce device reports it, for comparison:
// struct ibv_wc's src_qp is defined for UD only, and rxe leaves it 0 on
// connected QPs and sets IBV_WC_GRH there (every RoCE packet has a GRH),
// where goroce reports the peer QP and no GRH flag. On goroce devices wc is
// returned as it is.
func ConnectedRecv(wc verbs.WorkCompletion, peerQPN uint32) verbs.WorkCompletion {
	if Hardware() != "" {
		wc.SrcQP = peerQPN
		wc.WCFlags &^= verbs.WCGRH
	}
	return wc
}

// localize rewrites the source GID index 1 of a transition's address
// vector, goroce's address GID, as the one of the QP's device.
func localize(qp *verbs.QP, s *Transition) {
	if s.Mask&verbs.QPAttrAV != 0 && s.Attr.AHAttr.SGIDIndex == 1 {
		s.Attr.AHAttr.SGIDIndex = GIDIndex(qp.PD().Device())
	}
}

// PeerOf describes qp as a peer that starts sending at psn.
func PeerOf(t testing.TB, qp *verbs.QP, psn uint32) Peer {
	t.Helper()
	d := qp.PD().Device()
	gid, err := d.QueryGID(1, GIDIndex(d))
	if err != nil {
		t.Fatalf("QueryGID: %v", err)
	}
	return Peer{GID: gid, QPN: qp.QPN(), PSN: psn}
}

// Transition is one QP.Modify call.
type Transition struct {
	Attr verbs.QPAttr
	Mask verbs.QPAttrMask
}

// Transitions returns the three Modify calls (to INIT, RTR and RTS) that
// take a QP of type typ from RESET to RTS, sending from psn toward peer
// (ignored by UD), each with exactly the attributes the IBA requires of
// typ for that transition.
func Transitions(typ verbs.QPType, l Link, psn uint32, peer Peer) [3]Transition {
	init := Transition{verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1},
		verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort}
	rtr := Transition{verbs.QPAttr{QPState: verbs.QPStateRTR}, verbs.QPAttrState}
	rts := Transition{verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: psn}, verbs.QPAttrState | verbs.QPAttrSQPSN}
	if typ == verbs.QPTypeUD {
		init.Attr.QKey = l.QKey
		init.Mask |= verbs.QPAttrQKey
		return [3]Transition{init, rtr, rts}
	}
	init.Attr.QPAccessFlags = l.Access
	init.Mask |= verbs.QPAttrAccessFlags
	rtr.Attr.AHAttr = verbs.AddressVector{DGID: peer.GID, SGIDIndex: 1, HopLimit: 64, IsGlobal: true, PortNum: 1}
	rtr.Attr.PathMTU, rtr.Attr.DestQPNum, rtr.Attr.RQPSN = l.MTU, peer.QPN, peer.PSN
	rtr.Mask |= verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	if typ == verbs.QPTypeRC {
		rtr.Attr.MaxDestRdAtomic, rtr.Attr.MinRNRTimer = l.MaxDestRdAtomic, l.MinRNRTimer
		rtr.Mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
		if l.SelectiveRepeat {
			rtr.Attr.SelectiveRepeat = true
			rtr.Mask |= verbs.QPAttrSelectiveRepeat
		}
		rts.Attr.Timeout, rts.Attr.RetryCnt, rts.Attr.RNRRetry, rts.Attr.MaxRdAtomic = l.Timeout, l.RetryCnt, l.RNRRetry, l.MaxRdAtomic
		rts.Mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	}
	return [3]Transition{init, rtr, rts}
}

// BringUp moves qp from RESET to RTS (see Transitions). It takes no
// testing.TB, for a helper process that has none to fail.
func BringUp(qp *verbs.QP, l Link, psn uint32, peer Peer) error {
	for _, s := range Transitions(qp.Type(), l, psn, peer) {
		localize(qp, &s)
		if err := qp.Modify(&s.Attr, s.Mask); err != nil {
			return err
		}
	}
	return nil
}

// Modify applies s to qp.
func Modify(t testing.TB, qp *verbs.QP, s Transition) {
	t.Helper()
	localize(qp, &s)
	if err := qp.Modify(&s.Attr, s.Mask); err != nil {
		t.Fatalf("Modify to %v (mask %v) from %v: %v", s.Attr.QPState, s.Mask, qp.State(), err)
	}
}

// LinkQP moves qp from RESET to RTS (see Transitions).
func LinkQP(t testing.TB, qp *verbs.QP, l Link, psn uint32, peer Peer) {
	t.Helper()
	for _, s := range Transitions(qp.Type(), l, psn, peer) {
		Modify(t, qp, s)
	}
}

// The first PSNs of Connect: a's start just below 2^24, so that every
// test also crosses the PSN wrap.
const (
	PSNA = 0xFFFFF8
	PSNB = 0x2000
)

// Connect moves a's and b's QPs (RC or UC) to RTS toward each other, a
// with la and b with lb.
func Connect(t testing.TB, a, b *End, la, lb Link) {
	t.Helper()
	LinkQP(t, a.QP, la, PSNA, PeerOf(t, b.QP, PSNB))
	LinkQP(t, b.QP, lb, PSNB, PeerOf(t, a.QP, PSNA))
}

// Pair opens two ends, on testkit.Addr(1) and Addr(2) unless their
// options say otherwise, and brings their QPs to RTS with DefaultLink:
// connected to each other for RC and UC, each with Q_Key UDQKey for UD.
func Pair(t testing.TB, oa, ob EndOptions) (a, b *End) {
	t.Helper()
	if !oa.Addr.IsValid() && !oa.Device.Addr.IsValid() {
		oa.Addr = testkit.Addr(1)
	}
	if !ob.Addr.IsValid() && !ob.Device.Addr.IsValid() {
		ob.Addr = testkit.Addr(2)
	}
	a, b = NewEnd(t, oa), NewEnd(t, ob)
	if a.QP.Type() == verbs.QPTypeUD {
		LinkQP(t, a.QP, DefaultLink(), PSNA, Peer{})
		LinkQP(t, b.QP, DefaultLink(), PSNB, Peer{})
		return a, b
	}
	Connect(t, a, b, DefaultLink(), DefaultLink())
	return a, b
}

// PostSend posts wr on qp.
func PostSend(t testing.TB, qp *verbs.QP, wr verbs.SendWR) {
	t.Helper()
	if err := qp.PostSend(&wr); err != nil {
		t.Fatalf("PostSend(%v, wr_id %d): %v", wr.Opcode, wr.WRID, err)
	}
}

// PostRecv posts wr on qp.
func PostRecv(t testing.TB, qp *verbs.QP, wr verbs.RecvWR) {
	t.Helper()
	if err := qp.PostRecv(&wr); err != nil {
		t.Fatalf("PostRecv(wr_id %d): %v", wr.WRID, err)
	}
}

// Poll takes every completion cq holds now, without waiting.
func Poll(t testing.TB, cq *verbs.CQ) []verbs.WorkCompletion {
	t.Helper()
	var out []verbs.WorkCompletion
	buf := make([]verbs.WorkCompletion, 16)
	for {
		n, err := cq.Poll(buf)
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		out = append(out, buf[:n]...)
		if n < len(buf) {
			return out
		}
	}
}

// WaitN polls cq until n completions have arrived, and fails the test,
// with those that did, if they have not within testkit.Timeout. It polls
// (rather than parking in CQ.Wait) as an application that spins does, so
// that a device with BusyPoll is driven by the polls.
func WaitN(t testing.TB, cq *verbs.CQ, n int) []verbs.WorkCompletion {
	t.Helper()
	out := make([]verbs.WorkCompletion, 0, n)
	buf := make([]verbs.WorkCompletion, 16)
	deadline := time.Now().Add(testkit.Timeout)
	for len(out) < n {
		k, err := cq.Poll(buf[:min(len(buf), n-len(out))])
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions within %v: %s", len(out), n, testkit.Timeout, describe(out))
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return out
}

// WaitOne is WaitN for one completion.
func WaitOne(t testing.TB, cq *verbs.CQ) verbs.WorkCompletion {
	t.Helper()
	return WaitN(t, cq, 1)[0]
}

// ExpectEmpty fails the test if cq holds a completion.
func ExpectEmpty(t testing.TB, cq *verbs.CQ) {
	t.Helper()
	if wcs := Poll(t, cq); len(wcs) != 0 {
		t.Fatalf("unexpected completions: %s", describe(wcs))
	}
}

// describe lists completions one per line, for failure messages.
func describe(wcs []verbs.WorkCompletion) string {
	if len(wcs) == 0 {
		return "none"
	}
	var b strings.Builder
	for _, wc := range wcs {
		fmt.Fprintf(&b, "\n\twr_id %d %v %v qp %#x len %d", wc.WRID, wc.Opcode, wc.Status, wc.QPNum, wc.ByteLen)
	}
	return b.String()
}

// WantError fails the test unless err is a *verbs.Error that wraps
// sentinel (errors.Is) and names field, when field is not empty, with the
// package's prefix; a nil sentinel expects no error.
func WantError(t testing.TB, err, sentinel error, field string) {
	t.Helper()
	testkit.WantFieldErr(t, err, sentinel, field, func(e *verbs.Error) string { return e.Field }, "verbs: ")
}
