package verbs

import (
	"encoding/binary"
	"errors"
	"testing"
)

// The FLUSH and ATOMIC_WRITE tests port rdma-core's tests/test_qpex.py
// (test_qp_ex_rc_flush, test_qp_ex_rc_flush_type_violate,
// test_qp_ex_rc_atomic_write) and add the access and alignment violations
// rxe's responder reports.

// flushQPAccess is what rdma-core's tests give their QPs (utils.py
// create_qp_attr): remote write, read and atomic plus both flush rights.
const flushQPAccess = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead |
	AccessRemoteAtomic | AccessFlushGlobal | AccessFlushPersistent

// newFlushPair opens two connected ends, the responder b registered with
// mrAccess and its QP allowing qpAccess.
func newFlushPair(t *testing.T, mrAccess, qpAccess AccessFlags) (a, b *rcEnd) {
	t.Helper()
	a = newEnd(t, "127.0.1.1", endOpts{mrAccess: rcAccess})
	b = newEnd(t, "127.0.1.2", endOpts{mrAccess: mrAccess})
	la, lb := defaultLink(), defaultLink()
	la.access, lb.access = flushQPAccess, qpAccess
	connect(t, a, b, la, lb)
	return a, b
}

func flushWR(b *rcEnd, off uint64, length uint32, typ FlushType, level FlushLevel) SendWR {
	return SendWR{WRID: 0xF1, Opcode: WRFlush, SendFlags: SendSignaled,
		Flush: FlushParams{RemoteAddr: b.mr.IOVA() + off, RKey: b.mr.RKey(), Length: length, Type: typ, Level: level}}
}

func TestFlush(t *testing.T) {
	// QpExRCFlush registers FLUSH_GLOBAL | REMOTE_WRITE (plus local
	// write, which remote write needs here as in the kernel).
	const mrFlush = AccessLocalWrite | AccessRemoteWrite | AccessFlushGlobal
	cases := []struct {
		name     string
		mrAccess AccessFlags
		qpAccess AccessFlags
		wr       func(b *rcEnd) SendWR
		want     WCStatus
	}{
		{
			name: "test_qp_ex_rc_flush range", mrAccess: mrFlush, qpAccess: flushQPAccess,
			wr:   func(b *rcEnd) SendWR { return flushWR(b, 0, 4096, FlushGlobal, FlushRange) },
			want: WCSuccess,
		},
		{
			name: "test_qp_ex_rc_flush whole region, length 0", mrAccess: mrFlush, qpAccess: flushQPAccess,
			wr:   func(b *rcEnd) SendWR { return flushWR(b, 0, 0, FlushGlobal, FlushMR) },
			want: WCSuccess,
		},
		{
			name: "whole region ignores address and length", mrAccess: mrFlush, qpAccess: flushQPAccess,
			wr: func(b *rcEnd) SendWR {
				wr := flushWR(b, 0, 12345678, FlushGlobal, FlushMR)
				wr.Flush.RemoteAddr = 0
				return wr
			},
			want: WCSuccess,
		},
		{
			name: "test_qp_ex_rc_flush_type_violate", mrAccess: mrFlush, qpAccess: flushQPAccess,
			wr:   func(b *rcEnd) SendWR { return flushWR(b, 0, 4096, FlushPersistent, FlushRange) },
			want: WCRemAccessErr,
		},
		{
			name: "persistent flush of a persistent region", mrAccess: AccessFlushPersistent, qpAccess: flushQPAccess,
			wr:   func(b *rcEnd) SendWR { return flushWR(b, 64, 64, FlushPersistent, FlushRange) },
			want: WCSuccess,
		},
		{
			name: "both types need both rights", mrAccess: AccessFlushPersistent, qpAccess: flushQPAccess,
			wr:   func(b *rcEnd) SendWR { return flushWR(b, 64, 64, FlushPersistent|FlushGlobal, FlushMR) },
			want: WCRemAccessErr,
		},
		{
			name: "range beyond the region", mrAccess: mrFlush, qpAccess: flushQPAccess,
			wr:   func(b *rcEnd) SendWR { return flushWR(b, 1<<16-8, 16, FlushGlobal, FlushRange) },
			want: WCRemAccessErr,
		},
		{
			name: "invalid rkey", mrAccess: mrFlush, qpAccess: flushQPAccess,
			wr: func(b *rcEnd) SendWR {
				wr := flushWR(b, 0, 8, FlushGlobal, FlushMR)
				wr.Flush.RKey ^= 0x80
				return wr
			},
			want: WCRemAccessErr,
		},
		{
			name: "QP without FLUSH_GLOBAL", mrAccess: mrFlush, qpAccess: rcAccess,
			wr:   func(b *rcEnd) SendWR { return flushWR(b, 0, 8, FlushGlobal, FlushRange) },
			want: WCRemInvReqErr,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := newFlushPair(t, c.mrAccess, c.qpAccess)
			// flush_traffic writes first, then flushes.
			if c.mrAccess&AccessRemoteWrite != 0 {
				fill(a.buf[:4096], 7)
				mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, SGList: []SGE{a.mr.SGE(0, 4096)},
					RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}})
			}
			mustPostSend(t, a.qp, c.wr(b))
			wc := waitWC(t, a.cq)
			if wc.WRID != 0xF1 || wc.Status != c.want {
				t.Fatalf("completion %+v, want %v", wc, c.want)
			}
			if c.want != WCSuccess {
				return
			}
			if wc.Opcode != WCFlush {
				t.Fatalf("opcode %v, want FLUSH", wc.Opcode)
			}
			if c.mrAccess&AccessRemoteWrite != 0 {
				checkBytes(t, "flushed data", b.buf[:4096], a.buf[:4096])
			}
			// The connection is still usable: a second FLUSH.
			mustPostSend(t, a.qp, c.wr(b))
			if wc := waitWC(t, a.cq); wc.Status != WCSuccess {
				t.Fatalf("second flush %+v", wc)
			}
		})
	}
}

func TestFlushPostErrors(t *testing.T) {
	a, b := newFlushPair(t, AccessFlushGlobal, flushQPAccess)
	cases := []struct {
		name string
		wr   SendWR
	}{
		{"no placement type", flushWR(b, 0, 8, 0, FlushRange)},
		{"unknown placement type", flushWR(b, 0, 8, 4, FlushRange)},
		{"unknown level", flushWR(b, 0, 8, FlushGlobal, 2)},
		{"with data", func() SendWR {
			wr := flushWR(b, 0, 8, FlushGlobal, FlushRange)
			wr.SGList = []SGE{a.mr.SGE(0, 8)}
			return wr
		}()},
		{"over 2^31 bytes", flushWR(b, 0, 1<<31+1, FlushGlobal, FlushRange)},
	}
	for _, c := range cases {
		if err := a.qp.PostSend(&c.wr); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", c.name, err)
		}
	}
	expectEmpty(t, a.cq)
}

func TestAtomicWrite(t *testing.T) {
	const off = 4096
	cases := []struct {
		name     string
		mrAccess AccessFlags // the responder's region
		qpAccess AccessFlags
		raddr    func(b *rcEnd) uint64
		rkey     func(b *rcEnd) uint32
		want     WCStatus
	}{
		{name: "test_qp_ex_rc_atomic_write", mrAccess: AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead, qpAccess: flushQPAccess, want: WCSuccess},
		{name: "region without remote write", mrAccess: AccessLocalWrite | AccessRemoteAtomic, qpAccess: flushQPAccess, want: WCRemAccessErr},
		{name: "QP without remote write", mrAccess: rcAccess, qpAccess: AccessRemoteAtomic | AccessRemoteRead, want: WCRemInvReqErr},
		{
			name: "misaligned address", mrAccess: rcAccess, qpAccess: flushQPAccess,
			raddr: func(b *rcEnd) uint64 { return b.mr.IOVA() + off + 4 }, want: WCRemInvReqErr,
		},
		{
			name: "outside the region", mrAccess: rcAccess, qpAccess: flushQPAccess,
			raddr: func(b *rcEnd) uint64 { return b.mr.IOVA() + 1<<16 }, want: WCRemAccessErr,
		},
		{
			name: "invalid rkey", mrAccess: rcAccess, qpAccess: flushQPAccess,
			rkey: func(b *rcEnd) uint32 { return b.mr.RKey() + 1 }, want: WCRemAccessErr,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := newFlushPair(t, c.mrAccess, c.qpAccess)
			raddr, rkey := b.mr.IOVA()+off, b.mr.RKey()
			if c.raddr != nil {
				raddr = c.raddr(b)
			}
			if c.rkey != nil {
				rkey = c.rkey(b)
			}
			before := append([]byte(nil), b.buf...)
			value := []byte{1, 2, 3, 4, 5, 6, 7, 8}
			copy(a.buf[dstOff:], value)
			mustPostSend(t, a.qp, SendWR{WRID: 0xA7, Opcode: WRAtomicWrite, SendFlags: SendSignaled,
				SGList: []SGE{a.mr.SGE(dstOff, 8)}, RDMA: RDMAParams{RemoteAddr: raddr, RKey: rkey}})
			wc := waitWC(t, a.cq)
			if wc.WRID != 0xA7 || wc.Status != c.want {
				t.Fatalf("completion %+v, want %v", wc, c.want)
			}
			if c.want != WCSuccess {
				checkBytes(t, "target after a refused ATOMIC_WRITE", b.buf, before)
				return
			}
			if wc.Opcode != WCAtomicWrite || wc.ByteLen != 8 {
				t.Fatalf("completion %+v, want ATOMIC_WRITE of 8 bytes", wc)
			}
			// The bytes land as sent, in memory order.
			checkBytes(t, "atomic write", b.buf[off:off+8], value)
			checkBytes(t, "around it", b.buf[off+8:off+16], before[off+8:off+16])
			// And the next one replaces them.
			binary.LittleEndian.PutUint64(a.buf[dstOff:], 0x1122334455667788)
			mustPostSend(t, a.qp, SendWR{WRID: 0xA8, Opcode: WRAtomicWrite,
				SGList: []SGE{a.mr.SGE(dstOff, 8)}, RDMA: RDMAParams{RemoteAddr: raddr, RKey: rkey}})
			mustPostSend(t, a.qp, SendWR{WRID: 0xA9, Opcode: WRRDMARead, SendFlags: SendSignaled,
				SGList: []SGE{a.mr.SGE(0, 8)}, RDMA: RDMAParams{RemoteAddr: raddr, RKey: rkey}})
			if wc := waitWC(t, a.cq); wc.WRID != 0xA9 || wc.Status != WCSuccess {
				t.Fatalf("read back: %+v", wc)
			}
			if got := binary.LittleEndian.Uint64(a.buf[:8]); got != 0x1122334455667788 {
				t.Fatalf("read back %#x", got)
			}
		})
	}
}

func TestAtomicWritePostErrors(t *testing.T) {
	a, b := newFlushPair(t, rcAccess, flushQPAccess)
	for _, sgl := range [][]SGE{nil, {a.mr.SGE(0, 4)}, {a.mr.SGE(0, 4), a.mr.SGE(4, 4)}, {a.mr.SGE(0, 16)}} {
		err := a.qp.PostSend(&SendWR{Opcode: WRAtomicWrite, SGList: sgl, RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}})
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("SGL %v: %v, want ErrInvalidArgument", sgl, err)
		}
	}
	err := a.qp.PostSend(&SendWR{Opcode: WRAtomicWrite, SendFlags: SendInline, SGList: []SGE{a.mr.SGE(0, 8)},
		RDMA: RDMAParams{RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("inline: %v, want ErrInvalidArgument", err)
	}
	expectEmpty(t, a.cq)
}

// TestFlushThroughMW flushes and atomically writes through a memory
// window's rkey, which needs the rights on the window.
func TestFlushThroughMW(t *testing.T) {
	a, b := newFlushPair(t, AccessLocalWrite|AccessRemoteWrite|AccessMWBind|AccessFlushGlobal, flushQPAccess)
	mw := mustAllocMW(t, b.pd, MWType2)
	key := bindType2(t, b, mw, 0, 4096, AccessRemoteWrite|AccessFlushGlobal)
	mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRFlush, SendFlags: SendSignaled,
		Flush: FlushParams{RemoteAddr: b.mr.IOVA(), RKey: key, Length: 4096, Type: FlushGlobal, Level: FlushRange}})
	if wc := waitWC(t, a.cq); wc.Status != WCSuccess || wc.Opcode != WCFlush {
		t.Fatalf("flush through the window %+v", wc)
	}
	mustPostSend(t, a.qp, SendWR{WRID: 2, Opcode: WRFlush, SendFlags: SendSignaled,
		Flush: FlushParams{RKey: key, Type: FlushGlobal, Level: FlushMR}})
	if wc := waitWC(t, a.cq); wc.Status != WCSuccess {
		t.Fatalf("whole-window flush %+v", wc)
	}
	copy(a.buf[:8], "8 bytes!")
	mustPostSend(t, a.qp, SendWR{WRID: 3, Opcode: WRAtomicWrite, SendFlags: SendSignaled,
		SGList: []SGE{a.mr.SGE(0, 8)}, RDMA: RDMAParams{RemoteAddr: b.mr.IOVA() + 8, RKey: key}})
	if wc := waitWC(t, a.cq); wc.Status != WCSuccess {
		t.Fatalf("atomic write through the window %+v", wc)
	}
	checkBytes(t, "atomic write", b.buf[8:16], []byte("8 bytes!"))
	mustPostSend(t, a.qp, SendWR{WRID: 4, Opcode: WRFlush, SendFlags: SendSignaled,
		Flush: FlushParams{RKey: key, Type: FlushPersistent, Level: FlushMR}})
	if wc := waitWC(t, a.cq); wc.Status != WCRemAccessErr {
		t.Fatalf("persistent flush through a global window %+v, want %v", wc, WCRemAccessErr)
	}
}
