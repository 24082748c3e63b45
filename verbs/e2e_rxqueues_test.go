package verbs_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/netio"
	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// The tests of devices with several receive queues
// (DeviceConfig.ReceiveQueues): traffic of several QPs at once, whose
// packets are handled on as many goroutines, checked for what a race
// between them would break (data, per-QP order, each receive taken once).
// The whole suite also runs on such devices with
// GOROCE_TEST_RECEIVE_QUEUES=n (rdmatest.ReceiveQueuesEnv).

// rxQueueCounts are the receive queue counts these tests run with.
var rxQueueCounts = []int{2, 4}

// openQueued opens a device with n receive queues on testkit's address
// number host; on a platform without receive groups it has one, and the
// test is skipped.
func openQueued(t *testing.T, host, n int) *verbs.Device {
	t.Helper()
	d := rdmatest.OpenDevice(t, verbs.DeviceConfig{Addr: testkit.Addr(host), ReceiveQueues: n})
	switch got := d.ReceiveQueues(); {
	case !netio.ReusePortSpreads && got == 1:
		t.Skip("no receive groups on this platform: the knob is ignored, as documented")
	case got != n:
		t.Fatalf("ReceiveQueues() = %d, want %d", got, n)
	}
	return d
}

// endOn is an End around a new QP of typ on d, with a CQ and buffer of its
// own and its receives from srq unless nil.
func endOn(t *testing.T, d *verbs.Device, pd *verbs.PD, typ verbs.QPType, srq *verbs.SRQ, bufSize int) *rdmatest.End {
	t.Helper()
	e := &rdmatest.End{Dev: d, PD: pd, CQ: rdmatest.CQ(t, d, 1024), Buf: make([]byte, bufSize), SRQ: srq}
	e.MR = rdmatest.MR(t, pd, e.Buf, rdmatest.RCAccess)
	c := verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}
	if srq != nil {
		c.MaxRecvWR, c.MaxRecvSGE = 0, 0
	}
	e.QP = rdmatest.QP(t, pd, verbs.QPInitAttr{QPType: typ, SendCQ: e.CQ, RecvCQ: e.CQ, SRQ: srq, Cap: c})
	return e
}

// everyQueueDelivered fails the test unless each receive queue of d
// delivered packets: the QPs' flows did spread.
func everyQueueDelivered(t *testing.T, d *verbs.Device) {
	t.Helper()
	for i, n := range verbs.ReceiveQueueDelivered(d) {
		if n == 0 {
			t.Errorf("receive queue %d of %v delivered nothing: %v", i, d.Addr(), verbs.ReceiveQueueDelivered(d))
		}
	}
}

// pattern fills b with bytes that name the pair and round.
func pattern(b []byte, pair, round int) {
	for i := range b {
		b[i] = byte(pair*31 + round*7 + i*13)
	}
}

// TestE2EReceiveQueuesRC: 2n RC connections between two devices of n
// receive queues each run at once: each WRITEs 8 KiB (eight packets),
// SENDs with immediate data the round, and its peer READs the bytes back,
// checks them and SENDs back, so that both devices' responders and
// completers run on every queue, and QPs that acknowledge also take
// coalesced ACKs (which GSO and GRO may carry to another QP's queue). Every receive completes in order with the data its round
// wrote, and every queue of both devices delivered packets.
func TestE2EReceiveQueuesRC(t *testing.T) {
	for _, n := range rxQueueCounts {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			const (
				rounds = 30
				size   = 8 << 10
			)
			a, b := openQueued(t, 1, n), openQueued(t, 2, n)
			pda, pdb := rdmatest.PD(t, a), rdmatest.PD(t, b)
			pairs := 2 * n
			as, bs := make([]*rdmatest.End, pairs), make([]*rdmatest.End, pairs)
			for i := range pairs {
				if i == n {
					// One QP more on a only: the second half's QPs
					// on a take the next queue, so the ACKs b
					// coalesces from one of its queues are for QPs
					// of two queues on a.
					endOn(t, a, pda, verbs.QPTypeRC, nil, 64)
				}
				as[i] = endOn(t, a, pda, verbs.QPTypeRC, nil, 2*size)
				bs[i] = endOn(t, b, pdb, verbs.QPTypeRC, nil, 2*size)
				rdmatest.Connect(t, as[i], bs[i], rdmatest.DefaultLink(), rdmatest.DefaultLink())
			}
			errs := make(chan error, pairs)
			var wg sync.WaitGroup
			for i := range pairs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := rcRounds(as[i], bs[i], i, rounds, size); err != nil {
						errs <- fmt.Errorf("pair %d: %w", i, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			everyQueueDelivered(t, a)
			everyQueueDelivered(t, b)
			// Not asserted: how often GSO or GRO carried a QP's
			// packet to another queue depends on timing.
			t.Logf("packets handled off their QP's home queue: %d on a, %d on b", verbs.ReceiveQueueOffHome(a), verbs.ReceiveQueueOffHome(b))
		})
	}
}

// rcRounds runs the rounds of one connection of TestE2EReceiveQueuesRC:
// a WRITEs, then SENDs; b takes the receive, READs the bytes back from
// a's buffer into its second half and compares.
func rcRounds(a, b *rdmatest.End, pair, rounds, size int) error {
	for r := range rounds {
		if err := b.QP.PostRecv(&verbs.RecvWR{WRID: uint64(r), SGList: []verbs.SGE{b.MR.SGE(size, 0)}}); err != nil {
			return err
		}
		pattern(a.Buf[:size], pair, r)
		w := verbs.SendWR{WRID: uint64(r), Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.MR.SGE(0, size)},
			RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}}
		s := verbs.SendWR{WRID: uint64(r), Opcode: verbs.WRSendWithImm, SendFlags: verbs.SendSignaled, ImmData: uint32(r)}
		if _, err := a.QP.PostSendList([]verbs.SendWR{w, s}); err != nil {
			return err
		}
		if wc := pollOne(b.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.WRID != uint64(r) || wc.ImmData != uint32(r) {
			return fmt.Errorf("round %d: receive %+v", r, wc)
		}
		if wc := pollOne(a.CQ); wc.Status != verbs.WCSuccess || wc.WRID != uint64(r) {
			return fmt.Errorf("round %d: SEND completed %+v", r, wc)
		}
		want := b.Buf[:size]
		var exp [64]byte
		pattern(exp[:], pair, r)
		if !bytes.Equal(want[:64], exp[:]) {
			return fmt.Errorf("round %d: WRITE placed % x, want % x", r, want[:8], exp[:8])
		}
		rd := verbs.SendWR{WRID: uint64(r), Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{b.MR.SGE(size, size)}, RDMA: verbs.RDMAParams{RemoteAddr: a.MR.IOVA(), RKey: a.MR.RKey()}}
		if err := b.QP.PostSend(&rd); err != nil {
			return err
		}
		if wc := pollOne(b.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRDMARead || wc.WRID != uint64(r) {
			return fmt.Errorf("round %d: READ completed %+v", r, wc)
		}
		if !bytes.Equal(b.Buf[:size], b.Buf[size:]) {
			return fmt.Errorf("round %d: READ back differs from what was written", r)
		}
		// And a SEND back, so that a's QP acknowledges too: its
		// replies meet the ACKs b coalesces for all of a's QPs.
		if err := a.QP.PostRecv(&verbs.RecvWR{WRID: uint64(r), SGList: []verbs.SGE{a.MR.SGE(size, 64)}}); err != nil {
			return err
		}
		back := verbs.SendWR{WRID: uint64(r), Opcode: verbs.WRSendWithImm, SendFlags: verbs.SendSignaled, ImmData: uint32(r),
			SGList: []verbs.SGE{b.MR.SGE(0, 64)}}
		if err := b.QP.PostSend(&back); err != nil {
			return err
		}
		if wc := pollOne(a.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.ImmData != uint32(r) {
			return fmt.Errorf("round %d: SEND back received %+v", r, wc)
		}
		if wc := pollOne(b.CQ); wc.Status != verbs.WCSuccess || wc.WRID != uint64(r) {
			return fmt.Errorf("round %d: SEND back completed %+v", r, wc)
		}
		if !bytes.Equal(a.Buf[size:size+64], b.Buf[:64]) {
			return fmt.Errorf("round %d: SEND back placed other bytes", r)
		}
	}
	return nil
}

// TestE2EReceiveQueuesSRQ: one SRQ on a device of n receive queues feeds
// 2n RC QPs, two per queue, whose peers SEND at once; each QP's messages
// are taken from the SRQ on its own queue's goroutine, so the SRQ is
// consumed from all of them concurrently. Every receive is consumed once,
// each message lands whole in the buffer of the receive that took it, and
// each QP's messages complete in the order sent.
func TestE2EReceiveQueuesSRQ(t *testing.T) {
	for _, n := range rxQueueCounts {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			const (
				perPeer = 40
				slot    = 2048 // two packets at MTU 1024
			)
			a, b := openQueued(t, 1, n), openQueued(t, 2, n)
			pda, pdb := rdmatest.PD(t, a), rdmatest.PD(t, b)
			peers := 2 * n
			total := peers * perPeer
			srq, err := pdb.CreateSRQ(verbs.SRQInitAttr{MaxWR: total, MaxSGE: 1})
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, total*slot)
			mr := rdmatest.MR(t, pdb, buf, rdmatest.RCAccess)
			for i := range total {
				mustPostSRQ(t, srq, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{mr.SGE(i*slot, slot)}})
			}
			cq := rdmatest.CQ(t, b, 2*total)
			senders := make([]*rdmatest.End, peers)
			qpOf := map[uint32]int{}
			for i := range peers {
				senders[i] = endOn(t, a, pda, verbs.QPTypeRC, nil, slot)
				qp := rdmatest.QP(t, pdb, verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq,
					Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
				qpOf[qp.QPN()] = i
				rdmatest.Connect(t, senders[i], &rdmatest.End{Dev: b, PD: pdb, CQ: cq, QP: qp, Buf: buf, MR: mr},
					rdmatest.DefaultLink(), rdmatest.DefaultLink())
			}
			errs := make(chan error, peers)
			var wg sync.WaitGroup
			for pi, p := range senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for seq := range perPeer {
						binary.BigEndian.PutUint32(p.Buf[0:], uint32(pi))
						binary.BigEndian.PutUint32(p.Buf[4:], uint32(seq))
						fill(p.Buf[8:], byte(pi*50+seq))
						wr := verbs.SendWR{WRID: uint64(seq), Opcode: verbs.WRSendWithImm, SendFlags: verbs.SendSignaled,
							ImmData: uint32(seq), SGList: []verbs.SGE{p.MR.SGE(0, slot)}}
						if err := p.QP.PostSend(&wr); err != nil {
							errs <- err
							return
						}
						if wc := pollOne(p.CQ); wc.Status != verbs.WCSuccess {
							errs <- fmt.Errorf("peer %d: send %d completed %+v", pi, seq, wc)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			wcs := rdmatest.WaitN(t, cq, total)
			taken := make([]bool, total)
			next := make([]int, peers)
			want := make([]byte, slot-8)
			for _, wc := range wcs {
				pi, ok := qpOf[wc.QPNum]
				if !ok || wc.Status != verbs.WCSuccess || wc.WRID >= uint64(total) || taken[wc.WRID] || wc.ByteLen != slot {
					t.Fatalf("completion %+v", wc)
				}
				taken[wc.WRID] = true
				got := buf[int(wc.WRID)*slot:][:slot]
				seq := int(binary.BigEndian.Uint32(got[4:]))
				if int(binary.BigEndian.Uint32(got)) != pi || seq != next[pi] || wc.ImmData != uint32(seq) {
					t.Fatalf("QP %d: message %d from peer %d, want %d from %d (%+v)", pi, seq, binary.BigEndian.Uint32(got), next[pi], pi, wc)
				}
				next[pi]++
				fill(want, byte(pi*50+seq))
				if !bytes.Equal(got[8:], want) {
					t.Fatalf("QP %d message %d: payload differs", pi, seq)
				}
			}
			everyQueueDelivered(t, b)
		})
	}
}

// TestE2EReceiveQueuesUD: n UD QPs on a device of n receive queues (one
// per queue) each receive from 2n UD QPs on two other devices, all
// sending at once. Each datagram arrives once, whole, from the QP that
// sent it, and each sender's datagrams to one QP arrive in order.
func TestE2EReceiveQueuesUD(t *testing.T) {
	for _, n := range rxQueueCounts {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			const perPair = 20
			b := openQueued(t, 2, n)
			pdb := rdmatest.PD(t, b)
			recv := make([]*rdmatest.End, n)
			for i := range recv {
				recv[i] = endOn(t, b, pdb, verbs.QPTypeUD, nil, 64) // its buffer is replaced below
				linkUD(t, recv[i].QP, rdmatest.UDQKey)
			}
			var senders []*rdmatest.End
			for _, host := range []int{1, 3} {
				d := openQueued(t, host, n)
				pd := rdmatest.PD(t, d)
				for range n {
					e := endOn(t, d, pd, verbs.QPTypeUD, nil, 256)
					linkUD(t, e.QP, rdmatest.UDQKey)
					senders = append(senders, e)
				}
			}
			const slot = verbs.GRHSize + 64
			per := len(senders) * perPair // datagrams each receiver takes
			for _, r := range recv {
				r.Buf = make([]byte, per*slot)
				r.MR = rdmatest.MR(t, pdb, r.Buf, verbs.AccessLocalWrite)
				for i := range per {
					rdmatest.PostRecv(t, r.QP, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{r.MR.SGE(i*slot, slot)}})
				}
			}
			errs := make(chan error, len(senders))
			var wg sync.WaitGroup
			for si, s := range senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					gid, _ := b.QueryGID(1, 1)
					ah, err := s.PD.CreateAH(verbs.AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 64, IsGlobal: true, PortNum: 1})
					if err != nil {
						errs <- err
						return
					}
					for seq := range perPair {
						for ri, r := range recv {
							off := ri * 64
							binary.BigEndian.PutUint32(s.Buf[off:], uint32(si))
							binary.BigEndian.PutUint32(s.Buf[off+4:], uint32(seq))
							fill(s.Buf[off+8:off+64], byte(si+seq+ri))
							wr := verbs.SendWR{WRID: uint64(seq), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
								SGList: []verbs.SGE{s.MR.SGE(off, 64)},
								UD:     verbs.UDParams{AH: ah, RemoteQPN: r.QP.QPN(), RemoteQKey: rdmatest.UDQKey}}
							if err := s.QP.PostSend(&wr); err != nil {
								errs <- err
								return
							}
							if wc := pollOne(s.CQ); wc.Status != verbs.WCSuccess {
								errs <- fmt.Errorf("sender %d: %+v", si, wc)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			want := make([]byte, 56)
			for ri, r := range recv {
				next := make([]int, len(senders))
				for _, wc := range rdmatest.WaitN(t, r.CQ, per) {
					got := r.Buf[int(wc.WRID)*slot+verbs.GRHSize:][:64]
					si, seq := int(binary.BigEndian.Uint32(got)), int(binary.BigEndian.Uint32(got[4:]))
					if wc.Status != verbs.WCSuccess || wc.ByteLen != slot || si >= len(senders) || wc.SrcQP != senders[si].QP.QPN() || seq != next[si] {
						t.Fatalf("receiver %d: datagram %d of sender %d, want %d: %+v", ri, seq, si, next[si], wc)
					}
					next[si]++
					fill(want, byte(si+seq+ri))
					if !bytes.Equal(got[8:], want) {
						t.Fatalf("receiver %d: datagram %d of sender %d: payload differs", ri, seq, si)
					}
				}
			}
			everyQueueDelivered(t, b)
		})
	}
}
