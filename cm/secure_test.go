package cm

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/mad"
	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

var (
	testPSK  = []byte("a pre-shared key of 32 bytes....")
	otherPSK = []byte("another pre-shared key, 32 bytes")
)

// writeOver WRITEs msg from a's buffer into b's and waits for it.
func writeOver(t *testing.T, a, b *host, qa *verbs.QP, msg string) {
	t.Helper()
	copy(a.buf, msg)
	if err := qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, len(msg))}, RDMA: verbs.RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := rdmatest.WaitOne(t, a.cq); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE: %v", wc.Status)
	}
	if !bytes.Equal(b.buf[:len(msg)], []byte(msg)) {
		t.Fatalf("WRITE landed as %q", b.buf[:len(msg)])
	}
}

// TestSecureDial: both sides with the same PSK get a sealed connection
// whose data moves, private data beside the handshake's; the peer's
// private data comes without it.
func TestSecureDial(t *testing.T) {
	checkLeaks(t)
	for _, req := range []bool{false, true} {
		t.Run(map[bool]string{false: "offered", true: "required"}[req], func(t *testing.T) { secureDial(t, req) })
	}
}

func secureDial(t *testing.T, req bool) {
	{
		a, b := newHost(t, 1), newHost(t, 2)
		ca, cb, qa, qb := dialPair(t, a, b,
			&Params{Security: &Security{PSK: testPSK, Require: req}, PrivateData: []byte("hi b")},
			&Params{Security: &Security{PSK: testPSK, Require: req}, PrivateData: []byte("hello a")})
		if !qa.Sealed() || !qb.Sealed() {
			t.Fatalf("Require %v: QPs sealed %v %v", req, qa.Sealed(), qb.Sealed())
		}
		if got := ca.Remote().PrivateData; len(got) != MaxAcceptPrivateData-SecurityLen || !bytes.HasPrefix(got, []byte("hello a")) {
			t.Errorf("active side got private data %q (%d bytes)", got, len(got))
		}
		if got := cb.Remote().PrivateData; len(got) != MaxConnectPrivateData-SecurityLen || string(got) != "hi b" {
			t.Errorf("passive side got private data %q (%d bytes)", got, len(got))
		}
		writeOver(t, a, b, qa, "sealed WRITE")
		if c := b.dev.Counters(); c.DroppedAuthFail != 0 || c.DroppedReplay != 0 {
			t.Errorf("drops: %+v", c)
		}
		_ = ca.Close()
		<-cb.Done()
		_ = cb.Close()
		testkit.WaitFor(t, "timewait", func() bool { return records(a.dev) == 0 && records(b.dev) == 0 })
	}
}

// TestSecureRefusals: mismatched keys, or Require against a side that
// does not secure, refuse the connection with errors naming the cause on
// both sides; without Require on either side the connection is plain.
func TestSecureRefusals(t *testing.T) {
	checkLeaks(t)
	sec := func(psk []byte, req bool) *Params { return &Params{Security: &Security{PSK: psk, Require: req}} }
	for _, c := range []struct {
		name           string
		active, passve *Params
		refused        string // in both errors; "" for a plain connection
	}{
		{"mismatched PSK", sec(testPSK, false), sec(otherPSK, false), "pre-shared key"},
		{"mismatched PSK, required", sec(testPSK, true), sec(otherPSK, true), "pre-shared key"},
		{"active requires, passive plain", sec(testPSK, true), nil, "did not answer"},
		{"passive requires, active plain", nil, sec(testPSK, true), "requires encryption"},
		{"active offers, passive plain", sec(testPSK, false), nil, ""},
		{"passive offers, active plain", nil, sec(testPSK, false), ""},
		{"neither", nil, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := newHost(t, 1), newHost(t, 2)
			l, err := Listen(b.at(0))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			qa, qb := a.qp(t, verbs.QPTypeRC), b.qp(t, verbs.QPTypeRC)
			done := acceptOne(t, l, qb, c.passve)
			ca, err := Dial(testkit.Context(t), l.Addr().String(), qa, c.active)
			r := <-done
			if c.refused == "" {
				if err != nil || r.err != nil {
					t.Fatalf("refused: %v / %v", err, r.err)
				}
				if qa.Sealed() || qb.Sealed() {
					t.Fatal("a connection one side did not secure is sealed")
				}
				writeOver(t, a, b, qa, "plain WRITE")
				_ = ca.Close()
				<-r.conn.Done()
				_ = r.conn.Close()
			} else {
				if err == nil || r.err == nil {
					t.Fatalf("connected: dial %v, accept %v", err, r.err)
				}
				if !errors.Is(err, ErrInsecure) || !errors.Is(r.err, ErrInsecure) {
					t.Errorf("errors do not wrap ErrInsecure: dial %v; accept %v", err, r.err)
				}
				if !strings.Contains(err.Error()+r.err.Error(), c.refused) {
					t.Errorf("errors do not say %q: dial %v; accept %v", c.refused, err, r.err)
				}
				t.Logf("dial: %v\naccept: %v", err, r.err)
			}
			testkit.WaitFor(t, "records", func() bool { return records(a.dev) == 0 && records(b.dev) == 0 })
		})
	}
}

// TestSecureParams: too much private data beside the offer, or a short
// PSK, fail Dial naming the field.
func TestSecureParams(t *testing.T) {
	a := newHost(t, 1)
	for _, c := range []struct {
		p    Params
		want string
	}{
		{Params{Security: &Security{PSK: testPSK}, PrivateData: []byte("12345")}, "PrivateData"},
		{Params{Security: &Security{PSK: []byte("short")}}, "Security"},
	} {
		_, err := Dial(testkit.Context(t), "127.0.0.2:1", a.qp(t, verbs.QPTypeRC), &c.p)
		if !errors.Is(err, verbs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Dial with %+v: %v", c.p, err)
		}
	}
}

// forgery is a connection from a to b, plain or secured, and b's count
// of refused MADs before a forged one arrived.
type forgery struct {
	a, b    *host
	ca, cb  *Conn
	qa, qb  *verbs.QP
	refused func() uint64
	r0      uint64
}

// forge connects a to b, forges the MAD of attribute attr that build
// makes from the connection (what an on-path attacker saw in the REQ and
// REP: the comm IDs, the QP numbers), sends it to b from a third address,
// and waits until b's CM has read it.
func forge(t *testing.T, secured bool, attr mad.AttrID, tid uint64, build func(ca, cb *Conn, qb *verbs.QP) mad.Message) *forgery {
	t.Helper()
	f := &forgery{a: newHost(t, 1), b: newHost(t, 2)}
	var p *Params
	if secured {
		p = &Params{Security: &Security{PSK: testPSK, Require: true}}
	}
	f.ca, f.cb, f.qa, f.qb = dialPair(t, f.a, f.b, p, p)
	lock()
	m := build(f.ca, f.cb, f.qb)
	unlock()
	h := mad.CMHeader(attr, tid)
	forged, err := mad.AppendMAD(nil, &h, m)
	if err != nil {
		t.Fatal(err)
	}
	ab := agentOf(t, f.b.dev)
	f.refused = func() uint64 { return ab.counters().Refused }
	seen := func() uint64 { return ab.counters().Received[attr-mad.AttrREQ] }
	s0 := seen()
	f.r0 = f.refused()
	newRawPeer(t, 101).send(t, f.b.dev.Addr(), forged)
	testkit.WaitFor(t, "the forged MAD read", func() bool { return seen() > s0 })
	return f
}

// wantTornDown: the forgery ended the plain connection.
func (f *forgery) wantTornDown(t *testing.T) {
	t.Helper()
	select {
	case <-f.cb.Done():
	case <-testkit.Context(t).Done():
		t.Fatal("the forgery did not tear the plain connection down: the test proves nothing")
	}
}

// wantStillUp: the secured connection refused and counted the forgery,
// and still moves data.
func (f *forgery) wantStillUp(t *testing.T) {
	t.Helper()
	if f.refused() != f.r0+1 {
		t.Errorf("refused %d, want %d", f.refused(), f.r0+1)
	}
	select {
	case <-f.cb.Done():
		t.Fatalf("the forgery tore the secured connection down: %v", f.cb.Err())
	default:
	}
	if f.qb.State() != verbs.QPStateRTS {
		t.Fatalf("passive QP in %v", f.qb.State())
	}
	writeOver(t, f.a, f.b, f.qa, "still up")
}

// closeBoth closes both ends and waits until neither CM keeps a record.
func (f *forgery) closeBoth(t *testing.T) {
	t.Helper()
	_ = f.ca.Close()
	_ = f.cb.Close()
	testkit.WaitFor(t, "records", func() bool { return records(f.a.dev) == 0 && records(f.b.dev) == 0 })
}

// TestForgedDREQ: a DREQ forged by someone who knows the comm IDs and the
// QP number (an on-path attacker saw them in the REQ and REP), sent from
// another address, tears down a plain connection (as rdma_cm's would be)
// but not a secured one: there it is refused and counted, the data path
// stays up, and the peer's own Close still ends the connection.
func TestForgedDREQ(t *testing.T) {
	checkLeaks(t)
	for _, secured := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "secured"}[secured], func(t *testing.T) {
			f := forge(t, secured, mad.AttrDREQ, 0x5151, func(ca, cb *Conn, qb *verbs.QP) mad.Message {
				return &mad.DREQ{LocalCommID: uint32(ca.id.cmID), RemoteCommID: uint32(cb.id.cmID), RemoteQPN: qb.QPN(),
					PrivateData: make([]byte, 220)}
			})
			if !secured {
				f.wantTornDown(t)
				f.closeBoth(t)
				return
			}
			f.wantStillUp(t)
			_ = f.ca.Close()
			select {
			case <-f.cb.Done():
			case <-testkit.Context(t).Done():
				t.Fatal("the peer's own DREQ did not end the secured connection")
			}
			if f.refused() != f.r0+1 {
				t.Errorf("the genuine DREQ was refused")
			}
			f.closeBoth(t)
		})
	}
}

// time out.
func TestDestroyTagsDREQ(t *testing.T) {
	checkLeaks(t)
	for _, how := range []string{"destroy", "device-close"} {
		t.Run(how, func(t *testing.T) {
			a, b := newHost(t, 1), newHost(t, 2)
			p := &Params{Security: &Security{PSK: testPSK, Require: true}}
			ca, cb, qa, _ := dialPair(t, a, b, p, p)
			writeOver(t, a, b, qa, "sealed")
			ab := agentOf(t, b.dev)
			r0 := ab.counters().Refused
			if how == "destroy" {
				if err := ca.id.Destroy(); err != nil {
					t.Fatal(err)
				}
			} else if err := a.dev.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-cb.Done():
			case <-testkit.Context(t).Done():
				t.Fatalf("the peer's connection outlived the DREQ (refused DREQs %d, were %d)", ab.counters().Refused, r0)
			}
			if err := cb.Err(); !errors.Is(err, ErrDisconnected) {
				t.Errorf("peer's connection ended with %v, want ErrDisconnected", err)
			}
			if r := ab.counters().Refused; r != r0 {
				t.Errorf("refused DREQs %d, want %d", r, r0)
			}
			_ = ca.Close()
			_ = cb.Close()
			testkit.WaitFor(t, "records", func() bool { return records(b.dev) == 0 })
		})
	}
}

// TestForgedREJ: a REJ forged against an established connection by
// someone who knows the comm IDs (from the REQ and REP), sent from another
// address, tears a plain connection down, as rdma_cm's would be, but not
// a secured one: refused and counted, the data path stays up.
func TestForgedREJ(t *testing.T) {
	checkLeaks(t)
	for _, secured := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "secured"}[secured], func(t *testing.T) {
			f := forge(t, secured, mad.AttrREJ, 0x5152, func(ca, cb *Conn, _ *verbs.QP) mad.Message {
				return &mad.REJ{LocalCommID: uint32(ca.id.cmID), RemoteCommID: uint32(cb.id.cmID),
					MsgRejected: mad.RespondOther, Reason: mad.RejectConsumer}
			})
			if secured {
				f.wantStillUp(t)
			} else {
				f.wantTornDown(t)
			}
			f.closeBoth(t)
		})
	}
}
