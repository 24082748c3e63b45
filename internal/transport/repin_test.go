package transport

import (
	"bytes"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
)

// repinMemory is a testMemory whose local pins name their key, so that it
// can let one cover further accesses to that key (LocalRepinner). It counts
// the pins Local took and the accesses LocalAgain covered.
type repinMemory struct {
	*testMemory
	locals, reuses int
}

type keyPin struct {
	m   *testMemory
	key uint32
}

func (p *keyPin) Release() { p.m.refs-- }

func (m *repinMemory) Local(pd, lkey uint32, addr uint64, length uint32, need ibv.AccessFlags) ([]byte, Ref, error) {
	b, err := m.lookup(pd, lkey, addr, length, need)
	if err != nil {
		return nil, nil, err
	}
	m.refs++
	m.locals++
	return b, &keyPin{m.testMemory, lkey}, nil
}

func (m *repinMemory) LocalAgain(held Ref, pd, lkey uint32, addr uint64, length uint32, need ibv.AccessFlags) ([]byte, bool) {
	p, ok := held.(*keyPin)
	if !ok || p.key != lkey {
		return nil, false
	}
	b, err := m.lookup(pd, lkey, addr, length, need)
	if err != nil {
		return nil, false
	}
	m.reuses++
	return b, true
}

// TestZeroCopyRepins: the WQEs and zero-copy packets of one Output share
// the pin of their registration (LocalRepinner): the check of a WQE's
// memory before its first packet takes it, and everything after it from
// the same registration reuses it; WRITEs from two registrations take one
// each; every byte arrives as sent and every pin is released.
func TestZeroCopyRepins(t *testing.T) {
	tests := []struct {
		name           string
		sizes          []int // one WRITE per size, each from its own registration when split
		split          bool
		locals, reuses int
	}{
		{"one message", []int{16 << 10}, false, 1, 16},
		{"two messages, one buffer", []int{2 << 10, 2 << 10}, false, 1, 2 + 1 + 2},
		{"two messages, two buffers", []int{2 << 10, 2 << 10}, true, 2, 2 + 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := defaultOpts()
			o.sqSigAll = true
			a := newEndpoint("a", qpnA, o, nil)
			rm := &repinMemory{testMemory: a.mem}
			a.qp = NewQP(Config{
				QPN: qpnA, PD: pd, MaxSendWR: o.maxSendWR, MaxRecvWR: 64, MaxSGE: 4, MaxInline: 256,
				Memory: rm, SendCQ: a.scq, RecvCQ: a.rcq, SQSigAll: true,
			})
			b := newEndpoint("b", qpnB, o, nil)
			a.connect(t, o, qpnB, o.psnA, o.psnB)
			b.connect(t, o, qpnA, o.psnB, o.psnA)
			a.out.SetZeroCopy(true)
			l := newLink(t, a, b)

			total := 0
			for _, n := range tt.sizes {
				total += n
			}
			src := make([]byte, total)
			for i := range src {
				src[i] = byte(i*7 + i>>8)
			}
			dst := make([]byte, total)
			rkey := b.mem.register(pd, dst, 0, ibv.AccessRemoteWrite)
			whole := a.mem.register(pd, src, 0, 0)
			off := 0
			for i, n := range tt.sizes {
				lkey, va := whole, uint64(off)
				if tt.split {
					lkey, va = a.mem.register(pd, src[off:off+n], 0x10000, 0), 0x10000
				}
				l.post(a, SendWQE{WRID: uint64(i + 1), Opcode: ibv.WRRDMAWrite, SGL: []SGE{{va, uint32(n), lkey}},
					RemoteAddr: uint64(off), RKey: rkey})
				off += n
			}
			if rm.locals != tt.locals || rm.reuses != tt.reuses {
				t.Errorf("pins taken %d, accesses covered %d; want %d, %d", rm.locals, rm.reuses, tt.locals, tt.reuses)
			}
			l.run(time.Second)
			if got := len(a.scq.take()); got != len(tt.sizes) {
				t.Errorf("%d completions, want %d", got, len(tt.sizes))
			}
			if !bytes.Equal(dst, src) {
				t.Error("the WRITEs' bytes differ from the source")
			}
			checkIdle(t, a, b)
		})
	}
}
