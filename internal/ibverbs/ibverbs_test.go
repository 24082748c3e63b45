//go:build linux && cgo && goroce_ibverbs

package ibverbs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"
)

// The tests need an RDMA device: GOROCE_IBV_DEVICE names it (default: the
// first). Where there is none (this repository's CI host has no RDMA in its
// kernel) they skip; test/hw/run.sh runs them against rxe in the VM.

func openDevice(t *testing.T) *Device {
	t.Helper()
	d, err := Open(os.Getenv("GOROCE_IBV_DEVICE"))
	if errors.Is(err, ErrNoDevice) {
		t.Skip("no RDMA device here (set GOROCE_IBV_DEVICE, or run test/hw/run.sh)")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// gidIndex finds a RoCEv2 IPv4 GID of port 1 (::ffff:a.b.c.d), as
// perftest's -x picks one.
func gidIndex(t *testing.T, d *Device) (int, [16]byte) {
	t.Helper()
	pa, err := d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range pa.GIDTblLen {
		g, err := d.GID(1, i)
		if err != nil {
			continue
		}
		if bytes.Equal(g[:12], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}) {
			// rxe lists each address twice, RoCE v1 first.
			if i+1 < pa.GIDTblLen {
				if g2, err := d.GID(1, i+1); err == nil && g2 == g {
					return i + 1, g
				}
			}
			return i, g
		}
	}
	t.Fatal("no IPv4 GID on port 1")
	return 0, [16]byte{}
}

func TestDeviceQueries(t *testing.T) {
	names, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	d := openDevice(t)
	found := false
	for _, n := range names {
		found = found || n == d.Name
	}
	if !found {
		t.Fatalf("%q not among %v", d.Name, names)
	}
	a, err := d.Query()
	if err != nil {
		t.Fatal(err)
	}
	if a.MaxQP == 0 || a.MaxCQE == 0 || a.MaxMR == 0 || a.PhysPortCnt == 0 {
		t.Fatalf("attributes %+v", a)
	}
	pa, err := d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	if pa.State != PortActive || pa.GIDTblLen == 0 {
		t.Fatalf("port 1: %+v", pa)
	}
	if _, err := d.QueryPort(99); err == nil {
		t.Fatal("port 99 answered")
	}
}

// pair is two RC QPs of one device connected to each other, with a
// registered buffer each.
type pair struct {
	d      *Device
	pd     *PD
	cq     *CQ
	qa, qb *QP
	ba, bb []byte
	ma, mb *MR
}

func newPair(t *testing.T) *pair {
	t.Helper()
	p := &pair{d: openDevice(t)}
	var err error
	if p.pd, err = p.d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if p.cq, err = p.d.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	access := AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	for _, b := range []*[]byte{&p.ba, &p.bb} {
		if *b, err = Alloc(1 << 16); err != nil {
			t.Fatal(err)
		}
	}
	if p.ma, err = p.pd.RegMR(p.ba, access); err != nil {
		t.Fatal(err)
	}
	if p.mb, err = p.pd.RegMR(p.bb, access); err != nil {
		t.Fatal(err)
	}
	init := QPInitAttr{Type: QPTypeRC, SendCQ: p.cq, RecvCQ: p.cq, MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	if p.qa, err = p.pd.CreateQP(init); err != nil {
		t.Fatal(err)
	}
	if p.qb, err = p.pd.CreateQP(init); err != nil {
		t.Fatal(err)
	}
	sgid, gid := gidIndex(t, p.d)
	connect := func(q *QP, dest uint32, psn, peerPSN uint32) {
		t.Helper()
		steps := []struct {
			a    QPAttr
			mask int
		}{
			{QPAttr{State: QPStateInit, Port: 1, Access: access}, AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags},
			{QPAttr{State: QPStateRTR, PathMTU: MTU1024, DestQPN: dest, RQPSN: peerPSN, MaxDestRdAtomic: 1,
				MinRNRTimer: 12, Port: 1, DGID: gid, SGIDIndex: sgid, HopLimit: 64},
				AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer},
			{QPAttr{State: QPStateRTS, SQPSN: psn, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
				AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic},
		}
		for _, s := range steps {
			if err := q.Modify(&s.a, s.mask); err != nil {
				t.Fatalf("QP %#x to state %d: %v", q.QPN, s.a.State, err)
			}
		}
	}
	connect(p.qa, p.qb.QPN, 0x100, 0x200)
	connect(p.qb, p.qa.QPN, 0x200, 0x100)
	t.Cleanup(func() {
		for _, f := range []func() error{p.qa.Destroy, p.qb.Destroy, p.ma.Dereg, p.mb.Dereg, p.cq.Destroy, p.pd.Dealloc} {
			if err := f(); err != nil {
				t.Error(err)
			}
		}
		_ = Free(p.ba)
		_ = Free(p.bb)
	})
	return p
}

// wait polls until n completions arrived, or fails after 10 s.
func (p *pair) wait(t *testing.T, n int) []WC {
	t.Helper()
	out := make([]WC, 0, n)
	buf := make([]WC, 8)
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		k, err := p.cq.Poll(buf)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions: %+v", len(out), n, out)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	for _, wc := range out {
		if wc.Status != WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	return out
}

func TestRCOperations(t *testing.T) {
	p := newPair(t)
	for i := range 4096 {
		p.ba[i] = byte(i * 7)
	}
	// WRITE a → b.
	if err := p.qa.PostSend(&SendWR{WRID: 1, Opcode: WROpRDMAWrite, Flags: SendSignaled, Addr: p.ma.Addr, Len: 4096,
		LKey: p.ma.LKey, RemoteAddr: p.mb.Addr, RKey: p.mb.RKey}); err != nil {
		t.Fatal(err)
	}
	if wc := p.wait(t, 1)[0]; wc.WRID != 1 || wc.Opcode != WCOpRDMAWrite {
		t.Fatalf("WRITE: %+v", wc)
	}
	if !bytes.Equal(p.ba[:4096], p.bb[:4096]) {
		t.Fatal("WRITE: b's buffer differs")
	}
	// SEND with immediate b → a.
	if err := p.qa.PostRecv(2, p.ma.Addr+8192, 100, p.ma.LKey); err != nil {
		t.Fatal(err)
	}
	copy(p.bb[4096:], "hello from b")
	if err := p.qb.PostSend(&SendWR{WRID: 3, Opcode: WROpSendWithImm, Flags: SendSignaled, Addr: p.mb.Addr + 4096,
		Len: 12, LKey: p.mb.LKey, Imm: 0xdeadbeef}); err != nil {
		t.Fatal(err)
	}
	for _, wc := range p.wait(t, 2) {
		if wc.WRID == 2 && (wc.ByteLen != 12 || wc.Imm != 0xdeadbeef || wc.Flags&WCWithImm == 0 || wc.QPNum != p.qa.QPN) {
			t.Fatalf("receive: %+v", wc)
		}
	}
	if string(p.ba[8192:8204]) != "hello from b" {
		t.Fatalf("received %q", p.ba[8192:8204])
	}
	// READ b → a.
	copy(p.bb[12288:], "read me")
	if err := p.qa.PostSend(&SendWR{WRID: 4, Opcode: WROpRDMARead, Flags: SendSignaled, Addr: p.ma.Addr + 16384,
		Len: 7, LKey: p.ma.LKey, RemoteAddr: p.mb.Addr + 12288, RKey: p.mb.RKey}); err != nil {
		t.Fatal(err)
	}
	if wc := p.wait(t, 1)[0]; wc.Opcode != WCOpRDMARead || string(p.ba[16384:16391]) != "read me" {
		t.Fatalf("READ: %+v %q", wc, p.ba[16384:16391])
	}
	// FETCH_AND_ADD on b's 8 bytes at 20480: the old value comes back.
	binary.LittleEndian.PutUint64(p.bb[20480:], 40)
	if err := p.qa.PostSend(&SendWR{WRID: 5, Opcode: WROpAtomicFetchAndAdd, Flags: SendSignaled, Addr: p.ma.Addr + 24576,
		Len: 8, LKey: p.ma.LKey, RemoteAddr: p.mb.Addr + 20480, RKey: p.mb.RKey, CompareAdd: 2}); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 1)
	if old, now := binary.LittleEndian.Uint64(p.ba[24576:]), binary.LittleEndian.Uint64(p.bb[20480:]); old != 40 || now != 42 {
		t.Fatalf("FETCH_AND_ADD: old %d, now %d", old, now)
	}
	// A bad rkey: the IBTA error, nothing written.
	if err := p.qa.PostSend(&SendWR{WRID: 6, Opcode: WROpRDMAWrite, Flags: SendSignaled, Addr: p.ma.Addr, Len: 8,
		LKey: p.ma.LKey, RemoteAddr: p.mb.Addr, RKey: p.mb.RKey ^ 0x80}); err != nil {
		t.Fatal(err)
	}
	buf := make([]WC, 1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := p.cq.Poll(buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no completion for the bad rkey")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if buf[0].WRID != 6 || buf[0].Status == WCSuccess {
		t.Fatalf("bad rkey: %+v", buf[0])
	}
}

func TestPollDoesNotAllocate(t *testing.T) {
	p := newPair(t)
	wcs := make([]WC, 8)
	wr := SendWR{WRID: 9, Opcode: WROpRDMAWrite, Flags: SendSignaled, Addr: p.ma.Addr, Len: 64, LKey: p.ma.LKey,
		RemoteAddr: p.mb.Addr, RKey: p.mb.RKey}
	failed := false
	if n := testing.AllocsPerRun(100, func() {
		if p.qa.PostSend(&wr) != nil {
			failed = true
			return
		}
		for spins := 0; spins < 1e9; spins++ {
			if n, err := p.cq.Poll(wcs); n > 0 || err != nil {
				return
			}
		}
	}); n != 0 || failed {
		t.Fatalf("%v allocations per post and poll (a post failed: %v)", n, failed)
	}
}
