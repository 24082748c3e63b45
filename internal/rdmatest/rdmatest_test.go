package rdmatest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// TestTransitions checks the attributes of each transition against the
// IBA's required ones: Modify accepts no fewer and no more (verbs refuses
// both a missing required attribute and one the transition does not take).
func TestTransitions(t *testing.T) {
	for _, typ := range []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD} {
		t.Run(typ.String(), func(t *testing.T) {
			d := OpenDevice(t, verbs.DeviceConfig{})
			cq := CQ(t, d, 4)
			pd := PD(t, d)
			peer := Peer{GID: verbs.GIDFromAddr(testkit.Addr(2)), QPN: 0x123, PSN: 7}
			steps := Transitions(typ, DefaultLink(), 9, peer)
			for i, s := range steps {
				for bit := verbs.QPAttrMask(1); bit <= verbs.QPAttrDestQPN; bit <<= 1 {
					if s.Mask&bit == 0 || bit == verbs.QPAttrState {
						continue
					}
					// Without a required attribute, the transition fails.
					qp := QP(t, pd, verbs.QPInitAttr{QPType: typ, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
					for _, before := range steps[:i] {
						Modify(t, qp, before)
					}
					if err := qp.Modify(&s.Attr, s.Mask&^bit); !errors.Is(err, verbs.ErrInvalidArgument) {
						t.Errorf("step %d without %v: %v", i, bit, err)
					}
				}
			}
			qp := QP(t, pd, verbs.QPInitAttr{QPType: typ, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err := BringUp(qp, DefaultLink(), 9, peer); err != nil {
				t.Fatal(err)
			}
			attr, _, err := qp.Query(0)
			if err != nil || attr.QPState != verbs.QPStateRTS || attr.SQPSN != 9 {
				t.Fatalf("after BringUp: %v, %+v", err, attr)
			}
			if typ != verbs.QPTypeUD && (attr.DestQPNum != 0x123 || attr.RQPSN != 7 || attr.AHAttr.DGID != peer.GID) {
				t.Errorf("peer not applied: %+v", attr)
			}
		})
	}
}

// TestPairs sends a message over a Pair of each transport and checks what
// arrives and the completions WaitN returns.
func TestPairs(t *testing.T) {
	for _, typ := range []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD} {
		t.Run(typ.String(), func(t *testing.T) {
			a, b := Pair(t, EndOptions{Type: typ}, EndOptions{Type: typ})
			if a.Dev.Addr() != testkit.Addr(1) || b.Dev.Addr() != testkit.Addr(2) || a.QP.State() != verbs.QPStateRTS || b.QP.State() != verbs.QPStateRTS {
				t.Fatalf("ends on %v and %v in %v and %v", a.Dev.Addr(), b.Dev.Addr(), a.QP.State(), b.QP.State())
			}
			off := 0
			wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 5)}}
			if typ == verbs.QPTypeUD {
				ah, err := a.PD.CreateAH(verbs.AddressVector{DGID: verbs.GIDFromAddr(b.Dev.Addr()), SGIDIndex: 1, HopLimit: 64, IsGlobal: true, PortNum: 1})
				if err != nil {
					t.Fatal(err)
				}
				wr.UD = verbs.UDParams{AH: ah, RemoteQPN: b.QP.QPN(), RemoteQKey: UDQKey}
				off = verbs.GRHSize
			}
			copy(a.Buf, "hello")
			PostRecv(t, b.QP, verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{b.MR.SGE(0, 64)}})
			PostSend(t, a.QP, wr)
			if wc := WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess || wc.WRID != 1 {
				t.Fatalf("send completion %+v", wc)
			}
			if wc := WaitN(t, b.CQ, 1)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 2 || wc.ByteLen != uint32(off+5) {
				t.Fatalf("receive completion %+v", wc)
			}
			if !bytes.Equal(b.Buf[off:off+5], []byte("hello")) {
				t.Fatalf("received %q", b.Buf[off:off+5])
			}
			ExpectEmpty(t, a.CQ)
			if wcs := Poll(t, b.CQ); len(wcs) != 0 {
				t.Fatalf("extra completions %+v", wcs)
			}
		})
	}
}

// TestEndOptions checks that the options reach the objects.
func TestEndOptions(t *testing.T) {
	e := NewEnd(t, EndOptions{Addr: testkit.Addr(3), Channel: true, BufSize: 100, MRAccess: verbs.AccessLocalWrite,
		SRQ: &verbs.SRQInitAttr{MaxWR: 4}, SQSigAll: true, CQE: 7})
	if e.Dev.Addr() != testkit.Addr(3) || e.CQ.Channel() == nil || len(e.Buf) != 100 || e.MR.Access() != verbs.AccessLocalWrite ||
		e.SRQ == nil || e.CQ.Size() < 7 || e.QP.Cap().MaxSendWR < DefaultCap.MaxSendWR {
		t.Fatalf("end %+v", e)
	}
	_, init, err := e.QP.Query(0)
	if err != nil || !init.SQSigAll || init.SRQ != e.SRQ {
		t.Fatalf("QP init attributes %+v, %v", init, err)
	}
	// WantError matches the sentinel and the field.
	_, err = e.PD.CreateSRQ(verbs.SRQInitAttr{})
	WantError(t, err, verbs.ErrInvalidArgument, "max_wr")
}

// TestBackendEnv: GOROCE_TEST_BACKEND selects the hardware device by name,
// and ConnectedRecv adjusts completions on hardware only.
func TestBackendEnv(t *testing.T) {
	wc := verbs.WorkCompletion{SrcQP: 0, WCFlags: verbs.WCGRH | verbs.WCWithImm}
	for _, tc := range []struct {
		env, want string
		adjusted  verbs.WorkCompletion
	}{
		{"", "", wc},
		{"soft", "", wc},
		{"hw:rxe0", "rxe0", verbs.WorkCompletion{SrcQP: 7, WCFlags: verbs.WCWithImm}},
	} {
		t.Setenv(BackendEnv, tc.env)
		if got := Hardware(); got != tc.want {
			t.Errorf("%s=%q: Hardware() = %q, want %q", BackendEnv, tc.env, got, tc.want)
		}
		if got := ConnectedRecv(wc, 7); got != tc.adjusted {
			t.Errorf("%s=%q: ConnectedRecv = %+v, want %+v", BackendEnv, tc.env, got, tc.adjusted)
		}
	}
}
