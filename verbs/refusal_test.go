package verbs_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// TestRefusals makes the mistakes of a new user one at a time and checks
// that each side learns what to change: the requester an error wrapping
// the NAK's sentinel, the responder an asynchronous event (or, for an
// error charged to a receive, QP.Refusal) naming the failed check and the
// request.
func TestRefusals(t *testing.T) {
	const n = 64
	cases := []struct {
		name       string
		server     rdmatest.EndOptions
		noQPAccess bool // the server's QP grants no remote right
		wr         func(server, client *rdmatest.End) verbs.SendWR
		clientErr  error
		event      verbs.AsyncEventType // 0 (CQ_ERR, never raised here) for none
		want       verbs.Refusal        // Reason, Op, Need, QPAccess; RKey and address if set
		text       []string             // in the event's or the refusal's String
	}{{
		name:       "QP without REMOTE_READ",
		noQPAccess: true,
		wr: func(s, c *rdmatest.End) verbs.SendWR {
			wr, _ := s.MR.Remote().Read(128, c.MR.SGE(0, n))
			return wr
		},
		clientErr: verbs.ErrRemoteInvalidRequest,
		event:     verbs.EventQPReqErr,
		want:      verbs.Refusal{Reason: verbs.RefusedQPAccess, Op: verbs.WRRDMARead, Need: verbs.AccessRemoteRead, Length: n},
		text:      []string{"QP access flags check", "do not enable REMOTE_READ", "QPAttr.QPAccessFlags", "cm.Params.Access"},
	}, {
		name:   "MR without REMOTE_WRITE",
		server: rdmatest.EndOptions{MRAccess: verbs.AccessLocalWrite | verbs.AccessRemoteRead},
		wr: func(s, c *rdmatest.End) verbs.SendWR {
			wr, _ := s.MR.Remote().Write(128, c.MR.SGE(0, n))
			return wr
		},
		clientErr: verbs.ErrRemoteAccess,
		event:     verbs.EventQPAccessErr,
		want: verbs.Refusal{Reason: verbs.RefusedMemoryAccess, Op: verbs.WRRDMAWrite, Need: verbs.AccessRemoteWrite,
			QPAccess: rdmatest.RCAccess, Length: n},
		text: []string{"memory access rights check", "does not grant REMOTE_WRITE", "RegMR"},
	}, {
		name: "READ past the region's end",
		wr: func(s, c *rdmatest.End) verbs.SendWR {
			r := s.MR.Remote()
			return verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{c.MR.SGE(0, n)},
				RDMA: verbs.RDMAParams{RemoteAddr: r.Addr + r.Length - n/2, RKey: r.RKey}}
		},
		clientErr: verbs.ErrRemoteAccess,
		event:     verbs.EventQPAccessErr,
		want:      verbs.Refusal{Reason: verbs.RefusedBounds, Op: verbs.WRRDMARead, Need: verbs.AccessRemoteRead, QPAccess: rdmatest.RCAccess, Length: n},
		text:      []string{"bounds check", "is not inside the memory region"},
	}, {
		name: "wrong rkey",
		wr: func(s, c *rdmatest.End) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{c.MR.SGE(0, n)},
				RDMA: verbs.RDMAParams{RemoteAddr: s.MR.IOVA(), RKey: s.MR.RKey() ^ 0x55}}
		},
		clientErr: verbs.ErrRemoteAccess,
		event:     verbs.EventQPAccessErr,
		want:      verbs.Refusal{Reason: verbs.RefusedKey, Op: verbs.WRRDMARead, Need: verbs.AccessRemoteRead, QPAccess: rdmatest.RCAccess, Length: n},
		text:      []string{"rkey check", "names no memory region or bound memory window"},
	}, {
		name: "misaligned atomic",
		wr: func(s, c *rdmatest.End) verbs.SendWR {
			r := s.MR.Remote()
			return verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGList: []verbs.SGE{c.MR.SGE(0, 8)},
				Atomic: verbs.AtomicParams{RemoteAddr: r.Addr + 4, RKey: r.RKey, CompareAdd: 1}}
		},
		clientErr: verbs.ErrRemoteInvalidRequest,
		event:     verbs.EventQPReqErr,
		want: verbs.Refusal{Reason: verbs.RefusedMisaligned, Op: verbs.WRAtomicFetchAndAdd, Need: verbs.AccessRemoteAtomic,
			QPAccess: rdmatest.RCAccess, Length: 8},
		text: []string{"alignment check", "is not 8-byte aligned"},
	}, {
		name: "SEND longer than the receive buffer",
		wr: func(s, c *rdmatest.End) verbs.SendWR {
			if err := s.QP.PostRecv(&verbs.RecvWR{WRID: 5, SGList: []verbs.SGE{s.MR.SGE(0, 8)}}); err != nil {
				panic(err)
			}
			return verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{c.MR.SGE(0, n)}}
		},
		clientErr: verbs.ErrRemoteInvalidRequest,
		want:      verbs.Refusal{Reason: verbs.RefusedRecvTooShort, Op: verbs.WRSend, QPAccess: rdmatest.RCAccess, Length: n, RecvLength: 8},
		text:      []string{"receive buffer length check", "at least 64 bytes for a receive buffer of 8"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			server, client := newEnd(t, 1, c.server), newEnd(t, 2, rdmatest.EndOptions{})
			link := rdmatest.DefaultLink()
			if c.noQPAccess {
				link.Access = 0
			}
			rdmatest.Connect(t, server, client, link, rdmatest.DefaultLink())
			ctx := testkit.Context(t)
			wr := c.wr(server, client)
			wr.WRID = 3
			wc, err := client.QP.PostSendWait(ctx, &wr)
			if !errors.Is(err, c.clientErr) || wc.WRID != 3 {
				t.Fatalf("client: %+v, %v; want an error wrapping %v", wc, err, c.clientErr)
			}
			t.Logf("client: %v", err)

			var got verbs.Refusal
			var text string
			if c.event != 0 {
				ev := nextEvent(t, server.Dev)
				if ev.Type != c.event || ev.QP != server.QP {
					t.Fatalf("server event %v, want %v on %v", ev, c.event, server.QP)
				}
				got, text = ev.Refusal, ev.String()
				if r := server.QP.Refusal(); r != got {
					t.Errorf("QP.Refusal %+v, event's %+v", r, got)
				}
			} else {
				wcs := make([]verbs.WorkCompletion, 1)
				if _, err := server.CQ.Wait(ctx, wcs); !errors.Is(wcs[0].Err(), verbs.ErrLocalLength) || err != nil {
					t.Fatalf("server receive %+v (%v), want LOC_LEN_ERR", wcs[0], err)
				}
				got = server.QP.Refusal()
				text = got.String()
			}
			t.Logf("server: %s", text)
			want := c.want
			if want.RKey == 0 {
				want.RKey, want.RemoteAddr = got.RKey, got.RemoteAddr
			}
			want.PSN = got.PSN
			if got != want {
				t.Errorf("refusal %+v, want %+v", got, want)
			}
			if c.want.Op == verbs.WRRDMARead && c.want.Reason != verbs.RefusedKey && got.RKey != server.MR.RKey() {
				t.Errorf("refusal names rkey %#x, the request used %#x", got.RKey, server.MR.RKey())
			}
			for _, s := range c.text {
				if !strings.Contains(text, s) {
					t.Errorf("%q lacks %q", text, s)
				}
			}
			if s := server.QP.String(); !strings.Contains(s, " ERR (refused ") || !strings.Contains(s, c.want.Reason.String()) {
				t.Errorf("server QP prints as %q", s)
			}
			// The client's QP is in ERR: what it posts next is flushed.
			next, _ := server.MR.Remote().Read(0, client.MR.SGE(0, 8))
			if _, err := client.QP.PostSendWait(ctx, &next); !errors.Is(err, verbs.ErrFlushed) {
				t.Errorf("after the error: %v, want ErrFlushed", err)
			}
		})
	}
}
