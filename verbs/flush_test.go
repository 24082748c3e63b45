package verbs_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/verbs"
)

// The FLUSH and ATOMIC_WRITE tests port rdma-core's tests/test_qpex.py
// (test_qp_ex_rc_flush, test_qp_ex_rc_flush_type_violate,
// test_qp_ex_rc_atomic_write) and add the access and alignment violations
// rxe's responder reports.

// flushQPAccess is what rdma-core's tests give their QPs (utils.py
// create_qp_attr): remote write, read and atomic plus both flush rights.
const flushQPAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead |
	verbs.AccessRemoteAtomic | verbs.AccessFlushGlobal | verbs.AccessFlushPersistent

// newFlushPair opens two connected ends, the responder b registered with
// mrAccess and its QP allowing qpAccess.
func newFlushPair(t *testing.T, mrAccess, qpAccess verbs.AccessFlags) (a, b *rdmatest.End) {
	t.Helper()
	a = newEnd(t, 1, rdmatest.EndOptions{MRAccess: rdmatest.RCAccess})
	b = newEnd(t, 2, rdmatest.EndOptions{MRAccess: mrAccess})
	la, lb := rdmatest.DefaultLink(), rdmatest.DefaultLink()
	la.Access, lb.Access = flushQPAccess, qpAccess
	rdmatest.Connect(t, a, b, la, lb)
	return a, b
}

func flushWR(b *rdmatest.End, off uint64, length uint32, typ verbs.FlushType, level verbs.FlushLevel) verbs.SendWR {
	return verbs.SendWR{WRID: 0xF1, Opcode: verbs.WRFlush, SendFlags: verbs.SendSignaled,
		Flush: verbs.FlushParams{RemoteAddr: b.MR.IOVA() + off, RKey: b.MR.RKey(), Length: length, Type: typ, Level: level}}
}

func TestFlush(t *testing.T) {
	// QpExRCFlush registers FLUSH_GLOBAL | REMOTE_WRITE (plus local
	// write, which remote write needs here as in the kernel).
	const mrFlush = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessFlushGlobal
	cases := []struct {
		name     string
		mrAccess verbs.AccessFlags
		qpAccess verbs.AccessFlags
		wr       func(b *rdmatest.End) verbs.SendWR
		want     verbs.WCStatus
	}{
		{
			name: "test_qp_ex_rc_flush range", mrAccess: mrFlush, qpAccess: flushQPAccess,
			wr:   func(b *rdmatest.End) verbs.SendWR { return flushWR(b, 0, 4096, verbs.FlushGlobal, verbs.FlushRange) },
			want: verbs.WCSuccess,
		},
		{
			name: "test_qp_ex_rc_flush whole region, length 0", mrAccess: mrFlush, qpAccess: flushQPAccess,
			wr:   func(b *rdmatest.End) verbs.SendWR { return flushWR(b, 0, 0, verbs.FlushGlobal, verbs.FlushMR) },
			want: verbs.WCSuccess,
		},
		{
			name: "whole region ignores address and length", mrAccess: mrFlush, qpAccess: flushQPAccess,
			wr: func(b *rdmatest.End) verbs.SendWR {
				wr := flushWR(b, 0, 12345678, verbs.FlushGlobal, verbs.FlushMR)
				wr.Flush.RemoteAddr = 0
				return wr
			},
			want: verbs.WCSuccess,
		},
		{
			name: "test_qp_ex_rc_flush_type_violate", mrAccess: mrFlush, qpAccess: flushQPAccess,
			wr: func(b *rdmatest.End) verbs.SendWR {
				return flushWR(b, 0, 4096, verbs.FlushPersistent, verbs.FlushRange)
			},
			want: verbs.WCRemAccessErr,
		},
		{
			name: "persistent flush of a persistent region", mrAccess: verbs.AccessFlushPersistent, qpAccess: flushQPAccess,
			wr:   func(b *rdmatest.End) verbs.SendWR { return flushWR(b, 64, 64, verbs.FlushPersistent, verbs.FlushRange) },
			want: verbs.WCSuccess,
		},
		{
			name: "both types need both rights", mrAccess: verbs.AccessFlushPersistent, qpAccess: flushQPAccess,
			wr: func(b *rdmatest.End) verbs.SendWR {
				return flushWR(b, 64, 64, verbs.FlushPersistent|verbs.FlushGlobal, verbs.FlushMR)
			},
			want: verbs.WCRemAccessErr,
		},
		{
			name: "range beyond the region", mrAccess: mrFlush, qpAccess: flushQPAccess,
			wr: func(b *rdmatest.End) verbs.SendWR {
				return flushWR(b, 1<<16-8, 16, verbs.FlushGlobal, verbs.FlushRange)
			},
			want: verbs.WCRemAccessErr,
		},
		{
			name: "invalid rkey", mrAccess: mrFlush, qpAccess: flushQPAccess,
			wr: func(b *rdmatest.End) verbs.SendWR {
				wr := flushWR(b, 0, 8, verbs.FlushGlobal, verbs.FlushMR)
				wr.Flush.RKey ^= 0x80
				return wr
			},
			want: verbs.WCRemAccessErr,
		},
		{
			name: "QP without FLUSH_GLOBAL", mrAccess: mrFlush, qpAccess: rdmatest.RCAccess,
			wr:   func(b *rdmatest.End) verbs.SendWR { return flushWR(b, 0, 8, verbs.FlushGlobal, verbs.FlushRange) },
			want: verbs.WCRemInvReqErr,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := newFlushPair(t, c.mrAccess, c.qpAccess)
			// flush_traffic writes first, then flushes.
			if c.mrAccess&verbs.AccessRemoteWrite != 0 {
				fill(a.Buf[:4096], 7)
				rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.MR.SGE(0, 4096)},
					RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}})
			}
			rdmatest.PostSend(t, a.QP, c.wr(b))
			wc := rdmatest.WaitOne(t, a.CQ)
			if wc.WRID != 0xF1 || wc.Status != c.want {
				t.Fatalf("completion %+v, want %v", wc, c.want)
			}
			if c.want != verbs.WCSuccess {
				return
			}
			if wc.Opcode != verbs.WCFlush {
				t.Fatalf("opcode %v, want FLUSH", wc.Opcode)
			}
			if c.mrAccess&verbs.AccessRemoteWrite != 0 {
				checkBytes(t, "flushed data", b.Buf[:4096], a.Buf[:4096])
			}
			// The connection is still usable: a second FLUSH.
			rdmatest.PostSend(t, a.QP, c.wr(b))
			if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess {
				t.Fatalf("second flush %+v", wc)
			}
		})
	}
}

func TestFlushPostErrors(t *testing.T) {
	a, b := newFlushPair(t, verbs.AccessFlushGlobal, flushQPAccess)
	cases := []struct {
		name string
		wr   verbs.SendWR
	}{
		{"no placement type", flushWR(b, 0, 8, 0, verbs.FlushRange)},
		{"unknown placement type", flushWR(b, 0, 8, 4, verbs.FlushRange)},
		{"unknown level", flushWR(b, 0, 8, verbs.FlushGlobal, 2)},
		{"with data", func() verbs.SendWR {
			wr := flushWR(b, 0, 8, verbs.FlushGlobal, verbs.FlushRange)
			wr.SGList = []verbs.SGE{a.MR.SGE(0, 8)}
			return wr
		}()},
		{"over 2^31 bytes", flushWR(b, 0, 1<<31+1, verbs.FlushGlobal, verbs.FlushRange)},
	}
	for _, c := range cases {
		if err := a.QP.PostSend(&c.wr); !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", c.name, err)
		}
	}
	rdmatest.ExpectEmpty(t, a.CQ)
}

func TestAtomicWrite(t *testing.T) {
	const off = 4096
	cases := []struct {
		name     string
		mrAccess verbs.AccessFlags // the responder's region
		qpAccess verbs.AccessFlags
		raddr    func(b *rdmatest.End) uint64
		rkey     func(b *rdmatest.End) uint32
		want     verbs.WCStatus
	}{
		{name: "test_qp_ex_rc_atomic_write", mrAccess: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead, qpAccess: flushQPAccess, want: verbs.WCSuccess},
		{name: "region without remote write", mrAccess: verbs.AccessLocalWrite | verbs.AccessRemoteAtomic, qpAccess: flushQPAccess, want: verbs.WCRemAccessErr},
		{name: "QP without remote write", mrAccess: rdmatest.RCAccess, qpAccess: verbs.AccessRemoteAtomic | verbs.AccessRemoteRead, want: verbs.WCRemInvReqErr},
		{
			name: "misaligned address", mrAccess: rdmatest.RCAccess, qpAccess: flushQPAccess,
			raddr: func(b *rdmatest.End) uint64 { return b.MR.IOVA() + off + 4 }, want: verbs.WCRemInvReqErr,
		},
		{
			name: "outside the region", mrAccess: rdmatest.RCAccess, qpAccess: flushQPAccess,
			raddr: func(b *rdmatest.End) uint64 { return b.MR.IOVA() + 1<<16 }, want: verbs.WCRemAccessErr,
		},
		{
			name: "invalid rkey", mrAccess: rdmatest.RCAccess, qpAccess: flushQPAccess,
			rkey: func(b *rdmatest.End) uint32 { return b.MR.RKey() + 1 }, want: verbs.WCRemAccessErr,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := newFlushPair(t, c.mrAccess, c.qpAccess)
			raddr, rkey := b.MR.IOVA()+off, b.MR.RKey()
			if c.raddr != nil {
				raddr = c.raddr(b)
			}
			if c.rkey != nil {
				rkey = c.rkey(b)
			}
			before := append([]byte(nil), b.Buf...)
			value := []byte{1, 2, 3, 4, 5, 6, 7, 8}
			copy(a.Buf[dstOff:], value)
			rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 0xA7, Opcode: verbs.WRAtomicWrite, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(dstOff, 8)}, RDMA: verbs.RDMAParams{RemoteAddr: raddr, RKey: rkey}})
			wc := rdmatest.WaitOne(t, a.CQ)
			if wc.WRID != 0xA7 || wc.Status != c.want {
				t.Fatalf("completion %+v, want %v", wc, c.want)
			}
			if c.want != verbs.WCSuccess {
				checkBytes(t, "target after a refused ATOMIC_WRITE", b.Buf, before)
				return
			}
			if wc.Opcode != verbs.WCAtomicWrite || wc.ByteLen != 8 {
				t.Fatalf("completion %+v, want ATOMIC_WRITE of 8 bytes", wc)
			}
			// The bytes land as sent, in memory order.
			checkBytes(t, "atomic write", b.Buf[off:off+8], value)
			checkBytes(t, "around it", b.Buf[off+8:off+16], before[off+8:off+16])
			// And the next one replaces them.
			binary.LittleEndian.PutUint64(a.Buf[dstOff:], 0x1122334455667788)
			rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 0xA8, Opcode: verbs.WRAtomicWrite,
				SGList: []verbs.SGE{a.MR.SGE(dstOff, 8)}, RDMA: verbs.RDMAParams{RemoteAddr: raddr, RKey: rkey}})
			rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 0xA9, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(0, 8)}, RDMA: verbs.RDMAParams{RemoteAddr: raddr, RKey: rkey}})
			if wc := rdmatest.WaitOne(t, a.CQ); wc.WRID != 0xA9 || wc.Status != verbs.WCSuccess {
				t.Fatalf("read back: %+v", wc)
			}
			if got := binary.LittleEndian.Uint64(a.Buf[:8]); got != 0x1122334455667788 {
				t.Fatalf("read back %#x", got)
			}
		})
	}
}

func TestAtomicWritePostErrors(t *testing.T) {
	a, b := newFlushPair(t, rdmatest.RCAccess, flushQPAccess)
	for _, sgl := range [][]verbs.SGE{nil, {a.MR.SGE(0, 4)}, {a.MR.SGE(0, 4), a.MR.SGE(4, 4)}, {a.MR.SGE(0, 16)}} {
		err := a.QP.PostSend(&verbs.SendWR{Opcode: verbs.WRAtomicWrite, SGList: sgl, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}})
		if !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("SGL %v: %v, want ErrInvalidArgument", sgl, err)
		}
	}
	err := a.QP.PostSend(&verbs.SendWR{Opcode: verbs.WRAtomicWrite, SendFlags: verbs.SendInline, SGList: []verbs.SGE{a.MR.SGE(0, 8)},
		RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}})
	if !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("inline: %v, want ErrInvalidArgument", err)
	}
	rdmatest.ExpectEmpty(t, a.CQ)
}

// TestFlushThroughMW flushes and atomically writes through a memory
// window's rkey, which needs the rights on the window.
func TestFlushThroughMW(t *testing.T) {
	a, b := newFlushPair(t, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessMWBind|verbs.AccessFlushGlobal, flushQPAccess)
	mw := mustAllocMW(t, b.PD, verbs.MWType2)
	key := bindType2(t, b, mw, 0, 4096, verbs.AccessRemoteWrite|verbs.AccessFlushGlobal)
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRFlush, SendFlags: verbs.SendSignaled,
		Flush: verbs.FlushParams{RemoteAddr: b.MR.IOVA(), RKey: key, Length: 4096, Type: verbs.FlushGlobal, Level: verbs.FlushRange}})
	if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCFlush {
		t.Fatalf("flush through the window %+v", wc)
	}
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRFlush, SendFlags: verbs.SendSignaled,
		Flush: verbs.FlushParams{RKey: key, Type: verbs.FlushGlobal, Level: verbs.FlushMR}})
	if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("whole-window flush %+v", wc)
	}
	copy(a.Buf[:8], "8 bytes!")
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 3, Opcode: verbs.WRAtomicWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 8)}, RDMA: verbs.RDMAParams{RemoteAddr: b.MR.IOVA() + 8, RKey: key}})
	if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("atomic write through the window %+v", wc)
	}
	checkBytes(t, "atomic write", b.Buf[8:16], []byte("8 bytes!"))
	rdmatest.PostSend(t, a.QP, verbs.SendWR{WRID: 4, Opcode: verbs.WRFlush, SendFlags: verbs.SendSignaled,
		Flush: verbs.FlushParams{RKey: key, Type: verbs.FlushPersistent, Level: verbs.FlushMR}})
	if wc := rdmatest.WaitOne(t, a.CQ); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("persistent flush through a global window %+v, want %v", wc, verbs.WCRemAccessErr)
	}
}
