package cm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// TestConnect brings two QPs on two devices (127.0.2.1 and 127.0.2.2) to
// RTS through Dial and Accept and checks every negotiated attribute on
// both, then disconnects.
func TestConnect(t *testing.T) {
	tests := []struct {
		name     string
		typ      verbs.QPType
		mtuA     verbs.MTU // device MTUs; 0 = the loopback default, 4096
		mtuB     verbs.MTU
		pa, pb   *Params
		initA    verbs.AccessFlags // if not 0, hand QP A over in INIT with these flags
		wantMTU  verbs.MTU
		wantRdA  [2]int // A's max_rd_atomic, max_dest_rd_atomic
		wantRdB  [2]int
		wantAccA verbs.AccessFlags
		wantAccB verbs.AccessFlags
	}{
		{
			name: "RC defaults", typ: verbs.QPTypeRC,
			wantMTU: verbs.MTU4096, wantRdA: [2]int{128, 128}, wantRdB: [2]int{128, 128},
			wantAccA: DefaultAccess, wantAccB: DefaultAccess,
		},
		{
			name: "RC negotiated", typ: verbs.QPTypeRC, mtuB: verbs.MTU1024,
			pa: &Params{
				ResponderResources: 4, InitiatorDepth: 8, RetryCount: NoRetry, RNRRetryCount: 3,
				MinRNRTimer: 1, Timeout: 20, PrivateData: []byte("rkey=0x1234 addr=0xdead0000"),
				Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead,
			},
			pb: &Params{
				ResponderResources: 2, InitiatorDepth: 16, RetryCount: 5, RNRRetryCount: NoRetry,
				MinRNRTimer: 31, Timeout: 1, PrivateData: bytes.Repeat([]byte("B"), MaxPrivateData),
			},
			// A: max_rd_atomic = min(8, 2), max_dest_rd_atomic = min(4, 16).
			wantMTU: verbs.MTU1024, wantRdA: [2]int{2, 4}, wantRdB: [2]int{4, 2},
			wantAccA: verbs.AccessLocalWrite | verbs.AccessRemoteRead, wantAccB: DefaultAccess,
		},
		{
			name: "RC PathMTU cap", typ: verbs.QPTypeRC, mtuB: verbs.MTU2048,
			pa:      &Params{PathMTU: verbs.MTU512, ResponderResources: 1, InitiatorDepth: 1},
			wantMTU: verbs.MTU512, wantRdA: [2]int{1, 1}, wantRdB: [2]int{1, 1},
			wantAccA: DefaultAccess, wantAccB: DefaultAccess,
		},
		{
			name: "RC QP handed over in INIT keeps its access", typ: verbs.QPTypeRC,
			initA:   verbs.AccessRemoteWrite,
			wantMTU: verbs.MTU4096, wantRdA: [2]int{128, 128}, wantRdB: [2]int{128, 128},
			wantAccA: verbs.AccessRemoteWrite, wantAccB: DefaultAccess,
		},
		{
			name: "RC QP handed over in INIT with new access", typ: verbs.QPTypeRC,
			initA:   verbs.AccessRemoteWrite,
			pa:      &Params{Access: verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
			wantMTU: verbs.MTU4096, wantRdA: [2]int{128, 128}, wantRdB: [2]int{128, 128},
			wantAccA: verbs.AccessRemoteRead | verbs.AccessRemoteAtomic, wantAccB: DefaultAccess,
		},
		{
			name: "UC", typ: verbs.QPTypeUC, mtuA: verbs.MTU2048,
			pa:      &Params{PrivateData: []byte{0}},
			pb:      &Params{Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite},
			wantMTU: verbs.MTU2048,
			// UC QPs take no rd_atomic attributes: they keep their zero values.
			wantAccA: DefaultAccess, wantAccB: verbs.AccessLocalWrite | verbs.AccessRemoteWrite,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkLeaks(t)
			ha, hb := newHost(t, "127.0.2.1", tt.mtuA), newHost(t, "127.0.2.2", tt.mtuB)
			qa, qb := ha.qp(t, tt.typ), hb.qp(t, tt.typ)
			if tt.initA != 0 {
				attr := verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: tt.initA}
				if err := qa.Modify(&attr, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
					t.Fatal(err)
				}
				mr, err := ha.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
				if err != nil {
					t.Fatal(err)
				}
				if err := qa.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{mr.SGE(0, 64)}}); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			l := listen(t, ListenConfig{})
			res := acceptOne(ctx, l, acceptWith(ctx, qb, tt.pb))
			ca, err := Dial(ctx, l.Addr().String(), qa, tt.pa)
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			r := <-res
			if r.err != nil {
				t.Fatalf("passive side: %v", r.err)
			}
			cb := r.conn
			if ca.QP() != qa || cb.QP() != qb {
				t.Errorf("Conn.QP() does not return the QP connected")
			}

			pa, pb := tt.pa, tt.pb
			if pa == nil {
				pa = &Params{}
			}
			if pb == nil {
				pb = &Params{}
			}
			// Private data, both ways.
			if !bytes.Equal(r.req.PrivateData(), pa.PrivateData) || !bytes.Equal(cb.Remote().PrivateData, pa.PrivateData) {
				t.Errorf("passive side got private data %q, want %q", r.req.PrivateData(), pa.PrivateData)
			}
			if !bytes.Equal(ca.Remote().PrivateData, pb.PrivateData) {
				t.Errorf("active side got %d bytes of private data, want %d", len(ca.Remote().PrivateData), len(pb.PrivateData))
			}

			a, b := query(t, qa), query(t, qb)
			gidA, gidB := ha.gid(t), hb.gid(t)
			for _, s := range []struct {
				name       string
				attr, peer verbs.QPAttr
				qp, peerQP *verbs.QP
				p          *Params
				peerGID    verbs.GID
				remote     RemoteInfo
				rd         [2]int
				access     verbs.AccessFlags
			}{
				{"A", a, b, qa, qb, pa, gidB, ca.Remote(), tt.wantRdA, tt.wantAccA},
				{"B", b, a, qb, qa, pb, gidA, cb.Remote(), tt.wantRdB, tt.wantAccB},
			} {
				if s.attr.QPState != verbs.QPStateRTS {
					t.Errorf("%s: QP in %v, want RTS", s.name, s.attr.QPState)
				}
				if s.attr.DestQPNum != s.peerQP.QPN() || s.remote.QPN != s.peerQP.QPN() {
					t.Errorf("%s: dest_qp_num %#x, remote QPN %#x, want %#x", s.name, s.attr.DestQPNum, s.remote.QPN, s.peerQP.QPN())
				}
				// PSNs cross: each side expects what the other sends.
				if s.attr.RQPSN != s.peer.SQPSN || s.remote.PSN != s.peer.SQPSN {
					t.Errorf("%s: rq_psn %#x, remote PSN %#x, peer's sq_psn %#x", s.name, s.attr.RQPSN, s.remote.PSN, s.peer.SQPSN)
				}
				if s.attr.PathMTU != tt.wantMTU {
					t.Errorf("%s: path_mtu %v, want %v", s.name, s.attr.PathMTU, tt.wantMTU)
				}
				if got := [2]int{s.attr.MaxRdAtomic, s.attr.MaxDestRdAtomic}; got != s.rd {
					t.Errorf("%s: max_rd_atomic, max_dest_rd_atomic = %v, want %v", s.name, got, s.rd)
				}
				if s.attr.QPAccessFlags != s.access {
					t.Errorf("%s: qp_access_flags %v, want %v", s.name, s.attr.QPAccessFlags, s.access)
				}
				av := s.attr.AHAttr
				if av.DGID != s.peerGID || s.remote.GID != s.peerGID || av.SGIDIndex != 1 || !av.IsGlobal || av.PortNum != 1 || av.HopLimit != hopLimit {
					t.Errorf("%s: ah_attr %+v, remote GID %v, want dgid %v, sgid_index 1", s.name, av, s.remote.GID, s.peerGID)
				}
				if s.remote.UDPPort != verbs.DefaultUDPPort || s.remote.QPType != tt.typ || s.remote.Addr == nil {
					t.Errorf("%s: remote %+v", s.name, s.remote)
				}
				if tt.typ == verbs.QPTypeRC {
					want := struct{ timeout, retry, rnr, rnrTimer uint8 }{DefaultTimeout, DefaultRetryCount, DefaultRNRRetryCount, DefaultMinRNRTimer}
					if s.p.Timeout != 0 {
						want.timeout = s.p.Timeout
					}
					if s.p.MinRNRTimer != 0 {
						want.rnrTimer = s.p.MinRNRTimer
					}
					for _, f := range []struct {
						field *uint8
						v     uint8
					}{{&want.retry, s.p.RetryCount}, {&want.rnr, s.p.RNRRetryCount}} {
						switch f.v {
						case 0:
						case NoRetry:
							*f.field = 0
						default:
							*f.field = f.v
						}
					}
					got := struct{ timeout, retry, rnr, rnrTimer uint8 }{s.attr.Timeout, s.attr.RetryCnt, s.attr.RNRRetry, s.attr.MinRNRTimer}
					if got != want {
						t.Errorf("%s: timeout, retry_cnt, rnr_retry, min_rnr_timer = %v, want %v", s.name, got, want)
					}
				}
			}
			// The passive side's REP carries the negotiated values.
			if got := ca.Remote(); got.PathMTU != tt.wantMTU {
				t.Errorf("REP path MTU %v, want %v", got.PathMTU, tt.wantMTU)
			}

			// Disconnect: A closes, B hears of it.
			if ca.Err() != nil || cb.Err() != nil {
				t.Errorf("Err before Close: %v, %v", ca.Err(), cb.Err())
			}
			if err := ca.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			<-ca.Done()
			<-cb.Done()
			wantErr(t, "active Err after Close", ca.Err(), net.ErrClosed)
			wantErr(t, "passive Err after the peer's Close", cb.Err(), ErrDisconnected)
			wantState(t, "A after Close", qa, verbs.QPStateErr)
			wantState(t, "B before Close", qb, verbs.QPStateRTS)
			if err := cb.Close(); err != nil {
				t.Errorf("passive Close: %v", err)
			}
			wantState(t, "B after Close", qb, verbs.QPStateErr)
			wantErr(t, "passive Err after its own Close", cb.Err(), ErrDisconnected)
			if err := ca.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		})
	}
}

// TestPassiveCloses checks the other direction of a disconnect, and that
// Close flushes posted work requests.
func TestPassiveCloses(t *testing.T) {
	checkLeaks(t)
	ha, hb := newHost(t, "127.0.2.1", 0), newHost(t, "127.0.2.2", 0)
	qa, qb := ha.qp(t, verbs.QPTypeRC), hb.qp(t, verbs.QPTypeRC)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	l := listen(t, ListenConfig{})
	res := acceptOne(ctx, l, acceptWith(ctx, qb, nil))
	ca, err := Dial(ctx, l.Addr().String(), qa, nil)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	r := <-res
	if r.err != nil {
		t.Fatalf("Accept: %v", r.err)
	}
	mr, err := hb.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := qb.PostRecv(&verbs.RecvWR{WRID: 42, SGList: []verbs.SGE{mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := r.conn.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wc := make([]verbs.WorkCompletion, 2)
	if n, _ := hb.cq.Poll(wc); n != 1 || wc[0].WRID != 42 || wc[0].Status != verbs.WCWRFlushErr {
		t.Errorf("after Close: %d completions %+v, want WR 42 flushed", n, wc[:n])
	}
	<-ca.Done()
	wantErr(t, "active Err", ca.Err(), ErrDisconnected)
	if err := ca.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestReject: the passive application rejects with private data; the
// active QP stays in INIT and connects on a second attempt.
func TestReject(t *testing.T) {
	checkLeaks(t)
	ha, hb := newHost(t, "127.0.2.1", 0), newHost(t, "127.0.2.2", 0)
	qa, qb := ha.qp(t, verbs.QPTypeRC), hb.qp(t, verbs.QPTypeRC)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	l := listen(t, ListenConfig{})

	res := acceptOne(ctx, l, func(r *Request) (*Conn, error) {
		if err := r.Reject(make([]byte, MaxPrivateData+1)); !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("Reject with too much data: %v", err)
		}
		if err := r.Reject([]byte("come back later")); err != nil {
			return nil, err
		}
		_, err := r.Accept(ctx, qb, nil)
		wantErr(t, "Accept after Reject", err, verbs.ErrInvalidState)
		if err := r.Reject(nil); !errors.Is(err, verbs.ErrInvalidState) {
			t.Errorf("second Reject: %v", err)
		}
		return nil, nil
	})
	_, err := Dial(ctx, l.Addr().String(), qa, &Params{PrivateData: []byte("hello")})
	wantErr(t, "Dial", err, ErrRejected)
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != RejectConsumer || string(rej.PrivateData) != "come back later" {
		t.Errorf("Dial error %v, want a consumer reject with the private data", err)
	}
	if errors.Is(err, ErrMismatch) {
		t.Errorf("a consumer reject matches ErrMismatch")
	}
	if r := <-res; r.err != nil {
		t.Fatalf("passive side: %v", r.err)
	}
	wantState(t, "rejected QP", qa, verbs.QPStateInit)
	wantState(t, "passive QP", qb, verbs.QPStateReset)

	res = acceptOne(ctx, l, acceptWith(ctx, qb, nil))
	ca, err := Dial(ctx, l.Addr().String(), qa, nil)
	if err != nil {
		t.Fatalf("second Dial: %v", err)
	}
	r := <-res
	if r.err != nil {
		t.Fatalf("second Accept: %v", r.err)
	}
	_ = ca.Close()
	_ = r.conn.Close()
}

// TestMismatch: parameters only the passive side can judge are rejected,
// and both sides report ErrMismatch. Neither QP is left connected.
func TestMismatch(t *testing.T) {
	tests := []struct {
		name       string
		addrB      string
		typA, typB verbs.QPType
		reason     RejectReason
	}{
		{"QP types", "127.0.2.2", verbs.QPTypeRC, verbs.QPTypeUC, RejectInvalidTransportType},
		{"QP types reversed", "127.0.2.2", verbs.QPTypeUC, verbs.QPTypeRC, RejectInvalidTransportType},
		{"GID families", "::1", verbs.QPTypeRC, verbs.QPTypeRC, RejectInvalidGID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkLeaks(t)
			ha, hb := newHost(t, "127.0.2.1", 0), newHost(t, tt.addrB, 0)
			qa, qb := ha.qp(t, tt.typA), hb.qp(t, tt.typB)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			l := listen(t, ListenConfig{})
			res := acceptOne(ctx, l, acceptWith(ctx, qb, nil))
			_, err := Dial(ctx, l.Addr().String(), qa, nil)
			wantErr(t, "Dial", err, ErrRejected, ErrMismatch)
			var rej *RejectError
			if !errors.As(err, &rej) || rej.Reason != tt.reason || rej.Info == "" {
				t.Errorf("Dial error %v, want reason %v with info", err, tt.reason)
			}
			r := <-res
			wantErr(t, "Accept", r.err, ErrMismatch)
			if errors.Is(r.err, ErrRejected) {
				t.Errorf("Accept error %v: the passive side rejected, it was not rejected", r.err)
			}
			wantState(t, "active QP", qa, verbs.QPStateInit)
			wantState(t, "passive QP", qb, verbs.QPStateReset)
		})
	}
}

// TestInvalidParams: local mistakes are reported before any network I/O
// and leave the QP untouched.
func TestInvalidParams(t *testing.T) {
	checkLeaks(t)
	h := newHost(t, "127.0.2.1", 0)
	tests := []struct {
		name string
		p    *Params
		want error
	}{
		{"RetryCount", &Params{RetryCount: 8}, verbs.ErrInvalidArgument},
		{"RNRRetryCount", &Params{RNRRetryCount: 200}, verbs.ErrInvalidArgument},
		{"MinRNRTimer", &Params{MinRNRTimer: 32}, verbs.ErrInvalidArgument},
		{"Timeout", &Params{Timeout: 32}, verbs.ErrInvalidArgument},
		{"PathMTU", &Params{PathMTU: 6}, verbs.ErrInvalidArgument},
		{"GIDIndex", &Params{GIDIndex: 7}, verbs.ErrInvalidArgument},
		{"ResponderResources negative", &Params{ResponderResources: -1}, verbs.ErrInvalidArgument},
		{"ResponderResources above device", &Params{ResponderResources: 129}, verbs.ErrInvalidArgument},
		{"InitiatorDepth above a byte", &Params{InitiatorDepth: 256}, verbs.ErrInvalidArgument},
		{"PrivateData", &Params{PrivateData: make([]byte, MaxPrivateData+1)}, verbs.ErrInvalidArgument},
		{"Access", &Params{Access: verbs.AccessMWBind}, verbs.ErrInvalidArgument},
	}
	// Nothing listens on port 1: reaching the network would fail with
	// "connection refused", not with the error expected.
	const nowhere = "127.0.2.1:1"
	ctx := context.Background()
	for _, tt := range tests {
		qp := h.qp(t, verbs.QPTypeRC)
		_, err := Dial(ctx, nowhere, qp, tt.p)
		wantErr(t, tt.name, err, tt.want)
		wantState(t, tt.name, qp, verbs.QPStateReset)
	}

	qp := h.qp(t, verbs.QPTypeRC)
	_, err := Dial(ctx, nowhere, nil, nil)
	wantErr(t, "nil QP", err, verbs.ErrInvalidArgument)
	_, err = Dial(ctx, nowhere, h.qp(t, verbs.QPTypeUD), nil)
	wantErr(t, "UD QP", err, verbs.ErrNotSupported)
	if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState); err == nil {
		_, err = Dial(ctx, nowhere, qp, nil)
		wantErr(t, "QP in ERR", err, verbs.ErrInvalidState)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	qp = h.qp(t, verbs.QPTypeRC)
	_, err = Dial(canceled, nowhere, qp, nil)
	wantErr(t, "canceled context", err, context.Canceled)
	wantState(t, "canceled context", qp, verbs.QPStateReset)

	// Dialing nowhere with valid parameters reaches the network.
	_, err = Dial(ctx, nowhere, qp, nil)
	if err == nil || errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("Dial %s: %v, want a connection error", nowhere, err)
	}
}

// TestPassiveInvalidParams: the passive application's mistake is its own
// error, and the peer is told with a REJ.
func TestPassiveInvalidParams(t *testing.T) {
	checkLeaks(t)
	ha, hb := newHost(t, "127.0.2.1", 0), newHost(t, "127.0.2.2", 0)
	qa, qb := ha.qp(t, verbs.QPTypeRC), hb.qp(t, verbs.QPTypeRC)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	l := listen(t, ListenConfig{})
	res := acceptOne(ctx, l, acceptWith(ctx, qb, &Params{Timeout: 99}))
	_, err := Dial(ctx, l.Addr().String(), qa, nil)
	wantErr(t, "Dial", err, ErrRejected)
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != RejectNoResources {
		t.Errorf("Dial error %v, want RejectNoResources", err)
	}
	wantErr(t, "Accept", (<-res).err, verbs.ErrInvalidArgument)
	wantState(t, "passive QP", qb, verbs.QPStateReset)
}

// TestVersion: a peer of another protocol version gets a REJ it can read,
// and both sides report ErrVersion.
func TestVersion(t *testing.T) {
	t.Run("active peer", func(t *testing.T) {
		checkLeaks(t)
		h := newHost(t, "127.0.2.1", 0)
		l := listen(t, ListenConfig{})
		p := dialRaw(t, l.Addr())
		b, _ := (&message{typ: msgREQ, qpn: 2, gid: h.gid(t)}).encode()
		b[4] = 2
		p.send(append(b, "fields of version 2"...))
		rej := p.expect(msgREJ, RejectVersion)
		if rej.info == "" {
			t.Errorf("version REJ without info")
		}
		_, err := l.Accept(context.Background())
		wantErr(t, "Accept", err, ErrVersion)
		p.expectEOF()
	})
	t.Run("passive peer", func(t *testing.T) {
		checkLeaks(t)
		h := newHost(t, "127.0.2.1", 0)
		gid := h.gid(t)
		addr, done := rawServer(t, func(p *rawPeer) {
			p.expect(msgREQ, 0)
			b, _ := (&message{typ: msgREP, qpn: 2, gid: gid}).encode()
			b[4] = 3
			p.send(b)
			p.expect(msgREJ, RejectVersion)
		})
		qp := h.qp(t, verbs.QPTypeRC)
		_, err := Dial(context.Background(), addr, qp, nil)
		wantErr(t, "Dial", err, ErrVersion)
		<-done
		wantState(t, "QP", qp, verbs.QPStateInit)
	})
}

// TestBadREQ: requests the listener refuses whatever the local QP, each
// answered with a REJ and reported by Accept.
func TestBadREQ(t *testing.T) {
	checkLeaks(t)
	h := newHost(t, "127.0.2.1", 0)
	good := validREQ(h.gid(t))
	tests := []struct {
		name   string
		edit   func(m *message)
		want   error
		reason RejectReason
	}{
		{"MTU 0", func(m *message) { m.mtu = 0 }, ErrMismatch, RejectInvalidMTU},
		{"MTU 9", func(m *message) { m.mtu = 9 }, ErrMismatch, RejectInvalidMTU},
		{"UD", func(m *message) { m.qpType = verbs.QPTypeUD }, ErrMismatch, RejectInvalidTransportType},
		{"QPN 1", func(m *message) { m.qpn = 1 }, ErrMismatch, RejectUnsupported},
		{"zero GID", func(m *message) { m.gid = verbs.GID{} }, ErrMismatch, RejectInvalidGID},
		{"retry 8", func(m *message) { m.retryCount = 8 }, ErrMismatch, RejectUnsupported},
		{"timeout 32", func(m *message) { m.timeout = 32 }, ErrMismatch, RejectUnsupported},
		{"RTU first", func(m *message) { *m = message{typ: msgRTU} }, ErrProtocol, RejectUnsupported},
		{"REP first", func(m *message) { m.typ = msgREP }, ErrProtocol, RejectUnsupported},
	}
	l := listen(t, ListenConfig{})
	for _, tt := range tests {
		m := good
		tt.edit(&m)
		p := dialRaw(t, l.Addr())
		p.sendMessage(m)
		p.expect(msgREJ, tt.reason)
		p.expectEOF()
		_, err := l.Accept(context.Background())
		wantErr(t, tt.name, err, tt.want)
	}
	// The listener still works.
	p := dialRaw(t, l.Addr())
	p.sendMessage(good)
	req, err := l.Accept(context.Background())
	if err != nil {
		t.Fatalf("Accept after bad requests: %v", err)
	}
	if string(req.PrivateData()) != "raw REQ" || req.Remote().QPN != good.qpn || req.Remote().PSN != good.psn {
		t.Errorf("request %+v", req.Remote())
	}
	if err := req.Reject(nil); err != nil {
		t.Errorf("Reject: %v", err)
	}
	p.expect(msgREJ, RejectConsumer)
}

// TestBadREP: replies the active side refuses. The active QP never
// reaches RTR, so it stays in INIT.
func TestBadREP(t *testing.T) {
	tests := []struct {
		name   string
		reply  func(rep message) message
		want   error
		reason RejectReason // the REJ the active side must send, 0 for none
	}{
		{"MTU above proposal", func(m message) message { m.mtu = verbs.MTU4096; return m }, ErrMismatch, RejectInvalidMTU},
		{"UC for RC", func(m message) message { m.qpType = verbs.QPTypeUC; return m }, ErrMismatch, RejectInvalidTransportType},
		{"IPv6 GID", func(m message) message { m.gid[0] = 0xfe; m.gid[1] = 0x80; return m }, ErrMismatch, RejectInvalidGID},
		{"RTU", func(message) message { return message{typ: msgRTU} }, ErrProtocol, RejectUnsupported},
		{"DREQ", func(message) message { return message{typ: msgDREQ} }, ErrProtocol, RejectUnsupported},
		{"REJ timeout", func(message) message {
			return message{typ: msgREJ, reason: RejectTimeout, info: "passive side: context canceled"}
		}, ErrRejected, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkLeaks(t)
			h := newHost(t, "127.0.2.1", 0)
			rep := validREQ(verbs.GIDFromAddr(h.dev.Addr()))
			rep.typ = msgREP
			addr, done := rawServer(t, func(p *rawPeer) {
				p.expect(msgREQ, 0)
				p.sendMessage(tt.reply(rep))
				if tt.reason != 0 {
					p.expect(msgREJ, tt.reason)
				}
				p.expectEOF()
			})
			qp := h.qp(t, verbs.QPTypeRC)
			_, err := Dial(context.Background(), addr, qp, &Params{PathMTU: verbs.MTU1024})
			wantErr(t, "Dial", err, tt.want)
			<-done
			wantState(t, "QP", qp, verbs.QPStateInit)
		})
	}
}

// TestScriptedPassive connects to a passive side played by hand, then
// breaks the side channel without a DREQ: Done closes with the error.
func TestScriptedPassive(t *testing.T) {
	checkLeaks(t)
	h := newHost(t, "127.0.2.1", 0)
	peer := validREQ(verbs.GIDFromAddr(h.dev.Addr()))
	peer.typ, peer.privateData = msgREP, []byte("scripted")
	rtu := make(chan struct{})
	gid := h.gid(t)
	addr, done := rawServer(t, func(p *rawPeer) {
		req := p.expect(msgREQ, 0)
		if req.qpType != verbs.QPTypeRC || req.mtu != verbs.MTU4096 || req.gid != gid || req.udpPort != verbs.DefaultUDPPort ||
			req.retryCount != 7 || req.rnrRetryCount != 7 || req.minRNRTimer != 12 || req.timeout != 14 ||
			req.responderResources != 128 || req.initiatorDepth != 128 || req.psn > 0xFFFFFF {
			t.Errorf("REQ %+v", req)
		}
		p.sendMessage(peer)
		p.expect(msgRTU, 0)
		close(rtu)
		// Return: the connection closes without a DREQ.
	})
	qp := h.qp(t, verbs.QPTypeRC)
	c, err := Dial(context.Background(), addr, qp, nil)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	<-rtu
	<-done
	<-c.Done()
	wantErr(t, "Err", c.Err(), io.EOF)
	if errors.Is(c.Err(), ErrDisconnected) {
		t.Errorf("Err %v: the peer did not disconnect cleanly", c.Err())
	}
	attr := query(t, qp)
	if attr.QPState != verbs.QPStateRTS || attr.DestQPNum != peer.qpn || attr.RQPSN != peer.psn || attr.PathMTU != verbs.MTU1024 {
		t.Errorf("QP %+v", attr)
	}
	if string(c.Remote().PrivateData) != "scripted" {
		t.Errorf("private data %q", c.Remote().PrivateData)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	wantState(t, "QP after Close", qp, verbs.QPStateErr)
}

// TestGarbage: a peer that does not speak the protocol gives a one-line
// ErrProtocol error on either side.
func TestGarbage(t *testing.T) {
	junk := []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
	t.Run("passive peer", func(t *testing.T) {
		checkLeaks(t)
		h := newHost(t, "127.0.2.1", 0)
		addr, done := rawServer(t, func(p *rawPeer) {
			_, _ = p.recv()
			p.send(junk)
		})
		qp := h.qp(t, verbs.QPTypeRC)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		_, err := Dial(ctx, addr, qp, nil)
		wantErr(t, "Dial", err, ErrProtocol)
		if bytes.ContainsRune([]byte(err.Error()), '\n') {
			t.Errorf("error spans lines: %q", err)
		}
		<-done
	})
	t.Run("active peer", func(t *testing.T) {
		checkLeaks(t)
		l := listen(t, ListenConfig{})
		p := dialRaw(t, l.Addr())
		p.send(junk)
		_, err := l.Accept(context.Background())
		wantErr(t, "Accept", err, ErrProtocol)
		p.expectEOF()
	})
	t.Run("truncated REP", func(t *testing.T) {
		checkLeaks(t)
		h := newHost(t, "127.0.2.1", 0)
		gid := h.gid(t)
		addr, done := rawServer(t, func(p *rawPeer) {
			p.expect(msgREQ, 0)
			b, _ := (&message{typ: msgREP, qpn: 2, gid: gid}).encode()
			p.send(b[:20])
		})
		_, err := Dial(context.Background(), addr, h.qp(t, verbs.QPTypeRC), nil)
		wantErr(t, "Dial", err, io.ErrUnexpectedEOF)
		<-done
	})
	t.Run("peer closes", func(t *testing.T) {
		checkLeaks(t)
		h := newHost(t, "127.0.2.1", 0)
		addr, done := rawServer(t, func(p *rawPeer) { p.expect(msgREQ, 0) })
		_, err := Dial(context.Background(), addr, h.qp(t, verbs.QPTypeRC), nil)
		wantErr(t, "Dial", err, io.EOF)
		<-done
	})
	t.Run("REJ after RTU", func(t *testing.T) {
		checkLeaks(t)
		h := newHost(t, "127.0.2.1", 0)
		rep := validREQ(h.gid(t))
		rep.typ = msgREP
		addr, done := rawServer(t, func(p *rawPeer) {
			p.expect(msgREQ, 0)
			p.sendMessage(rep)
			p.expect(msgRTU, 0)
			p.sendMessage(message{typ: msgREJ, reason: RejectTimeout, info: "passive side: context canceled"})
			p.expectEOF()
		})
		c, err := Dial(context.Background(), addr, h.qp(t, verbs.QPTypeRC), nil)
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		<-c.Done()
		wantErr(t, "Err", c.Err(), ErrRejected)
		<-done
		_ = c.Close()
	})
	t.Run("message after RTU", func(t *testing.T) {
		checkLeaks(t)
		h := newHost(t, "127.0.2.1", 0)
		rep := validREQ(h.gid(t))
		rep.typ = msgREP
		addr, done := rawServer(t, func(p *rawPeer) {
			p.expect(msgREQ, 0)
			p.sendMessage(rep)
			p.expect(msgRTU, 0)
			p.sendMessage(rep)
			p.expectEOF()
		})
		c, err := Dial(context.Background(), addr, h.qp(t, verbs.QPTypeRC), nil)
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		<-c.Done()
		wantErr(t, "Err", c.Err(), ErrProtocol)
		<-done
		_ = c.Close()
	})
}

// TestSilentPeer: a peer that says nothing costs at most the caller's
// deadline (or the listener's handshake timeout).
func TestSilentPeer(t *testing.T) {
	const short = 100 * time.Millisecond
	t.Run("passive peer", func(t *testing.T) {
		checkLeaks(t)
		h := newHost(t, "127.0.2.1", 0)
		req := make(chan message, 1)
		addr, done := rawServer(t, func(p *rawPeer) {
			req <- p.expect(msgREQ, 0)
			rej := p.expect(msgREJ, RejectTimeout)
			if rej.info != "active side: context deadline exceeded" {
				t.Errorf("REJ info %q", rej.info)
			}
		})
		qp := h.qp(t, verbs.QPTypeRC)
		ctx, cancel := context.WithTimeout(context.Background(), short)
		defer cancel()
		_, err := Dial(ctx, addr, qp, nil)
		wantErr(t, "Dial", err, context.DeadlineExceeded)
		<-done
		wantState(t, "QP", qp, verbs.QPStateInit)
	})
	t.Run("active peer before REQ", func(t *testing.T) {
		checkLeaks(t)
		l := listen(t, ListenConfig{HandshakeTimeout: short})
		p := dialRaw(t, l.Addr())
		_, err := l.Accept(context.Background())
		wantErr(t, "Accept", err, os.ErrDeadlineExceeded)
		p.expectEOF()
	})
	t.Run("active peer before RTU", func(t *testing.T) {
		checkLeaks(t)
		h := newHost(t, "127.0.2.2", 0)
		l := listen(t, ListenConfig{})
		p := dialRaw(t, l.Addr())
		p.sendMessage(validREQ(verbs.GIDFromAddr(h.dev.Addr())))
		req, err := l.Accept(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		qp := h.qp(t, verbs.QPTypeRC)
		ctx, cancel := context.WithTimeout(context.Background(), short)
		defer cancel()
		_, err = req.Accept(ctx, qp, nil)
		wantErr(t, "Accept", err, context.DeadlineExceeded)
		p.expect(msgREP, 0)
		p.expect(msgREJ, RejectTimeout)
		p.expectEOF()
		// The QP was in RTS and the peer may have started sending.
		wantState(t, "QP", qp, verbs.QPStateErr)
	})
}

// TestCancel: canceling the context of a blocked call ends it with
// context.Canceled.
func TestCancel(t *testing.T) {
	t.Run("Listener.Accept", func(t *testing.T) {
		checkLeaks(t)
		l := listen(t, ListenConfig{})
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := l.Accept(ctx)
			errc <- err
		}()
		cancel()
		wantErr(t, "Accept", <-errc, context.Canceled)
		// The listener is still usable.
		p := dialRaw(t, l.Addr())
		p.send([]byte("x"))
		_ = p.nc.Close()
		_, err := l.Accept(context.Background())
		wantErr(t, "Accept after cancel", err, io.ErrUnexpectedEOF)
	})
	t.Run("Dial waiting for REP", func(t *testing.T) {
		checkLeaks(t)
		h := newHost(t, "127.0.2.1", 0)
		ctx, cancel := context.WithCancel(context.Background())
		addr, done := rawServer(t, func(p *rawPeer) {
			p.expect(msgREQ, 0)
			cancel()
			rej := p.expect(msgREJ, RejectTimeout)
			if rej.info != "active side: context canceled" {
				t.Errorf("REJ info %q", rej.info)
			}
		})
		_, err := Dial(ctx, addr, h.qp(t, verbs.QPTypeRC), nil)
		wantErr(t, "Dial", err, context.Canceled)
		<-done
	})
	t.Run("Request.Accept waiting for RTU", func(t *testing.T) {
		checkLeaks(t)
		h := newHost(t, "127.0.2.2", 0)
		l := listen(t, ListenConfig{})
		p := dialRaw(t, l.Addr())
		p.sendMessage(validREQ(verbs.GIDFromAddr(netip.MustParseAddr("127.0.2.1"))))
		req, err := l.Accept(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			p.expect(msgREP, 0)
			cancel()
		}()
		qp := h.qp(t, verbs.QPTypeRC)
		_, err = req.Accept(ctx, qp, nil)
		wantErr(t, "Accept", err, context.Canceled)
		p.expect(msgREJ, RejectTimeout)
		wantState(t, "QP", qp, verbs.QPStateErr)
	})
}

// TestListenerClose: closing a listener drops the peers it holds (one
// silent, one whose request nobody accepted) and ends its goroutines.
func TestListenerClose(t *testing.T) {
	checkLeaks(t)
	h := newHost(t, "127.0.2.1", 0)
	l, err := Listen("127.0.2.1:0")
	if err != nil {
		t.Fatal(err)
	}
	silent := dialRaw(t, l.Addr())
	waiting := dialRaw(t, l.Addr())
	waiting.sendMessage(validREQ(h.gid(t)))
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	silent.expectEOF()
	waiting.expectEOF()
	_, err = l.Accept(context.Background())
	wantErr(t, "Accept after Close", err, net.ErrClosed)
	wantErr(t, "second Close", l.Close(), net.ErrClosed)
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Errorf("the closed listener still accepts connections")
	}
}

// TestBadRTU: answers to the REP the passive side refuses or reports. Its
// QP was already in RTS, so it ends in ERR.
func TestBadRTU(t *testing.T) {
	tests := []struct {
		name   string
		answer func() []byte
		want   []error
		reason RejectReason // the REJ the passive side must send, 0 for none
	}{
		{"REJ", func() []byte {
			b, _ := (&message{typ: msgREJ, reason: RejectInvalidMTU, info: "no"}).encode()
			return b
		}, []error{ErrRejected, ErrMismatch}, 0},
		{"second REQ", func() []byte {
			b, _ := (&message{typ: msgREQ, qpn: 2}).encode()
			return b
		}, []error{ErrProtocol}, RejectUnsupported},
		{"version 2", func() []byte {
			b, _ := (&message{typ: msgRTU}).encode()
			b[4] = 2
			return b
		}, []error{ErrVersion}, RejectVersion},
		{"garbage", func() []byte { return []byte("\x00\x00\x00\x00\x00\x00\x00\x00") }, []error{ErrProtocol}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkLeaks(t)
			h := newHost(t, "127.0.2.2", 0)
			l := listen(t, ListenConfig{})
			p := dialRaw(t, l.Addr())
			p.sendMessage(validREQ(verbs.GIDFromAddr(netip.MustParseAddr("127.0.2.1"))))
			req, err := l.Accept(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				p.expect(msgREP, 0)
				p.send(tt.answer())
			}()
			qp := h.qp(t, verbs.QPTypeRC)
			_, err = req.Accept(context.Background(), qp, nil)
			wantErr(t, "Accept", err, tt.want...)
			if tt.reason != 0 {
				p.expect(msgREJ, tt.reason)
			}
			p.expectEOF()
			wantState(t, "QP", qp, verbs.QPStateErr)
		})
	}
}
