package transport

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/wire"
)

// TestFuzzUnreliableSeeds checks the committed seed corpus of
// FuzzHandleUnreliable against unreliableSeeds (-update-seeds rewrites it).
func TestFuzzUnreliableSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzHandleUnreliable")
	for _, s := range unreliableSeeds() {
		file := filepath.Join(dir, s.name)
		want := "go test fuzz v1\n[]byte(" + strconv.Quote(string(s.data)) + ")\n"
		if *updateSeeds {
			must(t, os.MkdirAll(dir, 0o755))
			must(t, os.WriteFile(file, []byte(want), 0o644))
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil || string(got) != want {
			t.Errorf("%s is stale or missing (%v); run go test -run TestFuzzUnreliableSeeds -update-seeds", file, err)
		}
	}
}

// FuzzHandleUnreliable feeds arbitrary packets to the receive path of a UC
// or a UD QP (the first input byte chooses: even UC, odd UD; bit 1 gives
// the QP an SRQ), the rest as in FuzzHandlePacket. Whatever arrives, the QP
// must not panic, must never answer (UC and UD have no ACKs), must release
// every Ref, and must complete each receive work request at most once.
func FuzzHandleUnreliable(f *testing.F) {
	// The seeds are in testdata/fuzz/FuzzHandleUnreliable.
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		typ := ibv.QPTypeUC
		if data[0]&1 != 0 {
			typ = ibv.QPTypeUD
		}
		o := defaultOpts()
		o.mtu = 256
		o.srq = data[0]&2 != 0
		_, b := newUnreliablePair(t, typ, o, fuzzQKey)
		mem := make([]byte, 4096)
		rkey := b.mem.register(pd, mem, 0, ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
		if rkey != 0x15A {
			t.Fatal("keys changed; update the seeds")
		}
		for i := range 3 {
			w := RecvWQE{WRID: uint64(i), SGL: []SGE{{uint64(i) * 1024, 1024, rkey}}}
			if o.srq {
				must(t, b.qp.srq.(*SRQ).PostRecv(&w))
			} else {
				must(t, b.qp.PostRecv(&w))
			}
		}
		now := time.Unix(1_000_000, 0)
		var pkt wire.Packet
		buf := make([]byte, 0, 8192)
		fuzzPackets(data[1:], func(step time.Duration, raw []byte) {
			now = now.Add(step)
			buf = append(append(buf[:0], raw...), 0, 0, 0, 0) // the ICRC, unchecked here
			if pkt.Parse(buf, 0) != nil {
				return
			}
			b.qp.HandlePacketFrom(&pkt, &nhV4, now, &b.out)
			b.qp.OnTimer(now, &b.out)
			if b.out.Len() != 0 {
				t.Fatalf("%v QP answered %d packets", typ, b.out.Len())
			}
		})
		if b.mem.refs != 0 {
			t.Fatalf("%d Refs not released", b.mem.refs)
		}
		seen := map[uint64]bool{}
		for _, c := range b.rcq.c {
			if seen[c.WRID] || c.WRID > 2 {
				t.Fatalf("bad completions %+v", b.rcq.c)
			}
			seen[c.WRID] = true
			if typ == ibv.QPTypeUD && c.Status == ibv.WCSuccess && (c.ByteLen < GRHLen || c.Flags&ibv.WCGRH == 0) {
				t.Fatalf("UD completion without its GRH: %+v", c)
			}
		}
		b.qp.Flush()
		if !o.srq && len(b.rcq.c) != 3 {
			t.Fatalf("%d receive completions after flush, want 3", len(b.rcq.c))
		}
	})
}

// fuzzQKey is the Q_Key of the fuzzed UD QP.
const fuzzQKey = 0x11111111

// unreliableSeeds returns inputs that drive the UC and UD receive paths
// through their main cases: whole messages, a gap mid-message with recovery
// at the next FIRST, WRITEs, Q_Key mismatches.
func unreliableSeeds() []fuzzSeed {
	seq := func(kind byte, pkts ...[]byte) []byte {
		b := []byte{kind}
		for _, x := range pkts {
			b = binary.BigEndian.AppendUint16(b, uint16(len(x)))
			b = append(b, 10)
			b = append(b, x...)
		}
		return b
	}
	full := make([]byte, 256)
	for i := range full {
		full[i] = byte(i)
	}
	uc := func(op wire.Opcode, n uint32, payload []byte, set func(h *wire.Headers)) []byte {
		return req(op, base.Add(n), false, payload, set)
	}
	reth := func(va uint64, l uint32) func(h *wire.Headers) {
		return func(h *wire.Headers) { h.RETH = wire.RETHFields{VA: va, RKey: 0x15A, DMALength: l} }
	}
	ud := func(op wire.Opcode, qkey uint32, payload []byte) []byte {
		h := wire.Headers{
			BTH:  wire.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: qpnB, PSN: 77, PadCount: wire.PadCount(len(payload))},
			DETH: wire.DETHFields{QKey: qkey, SrcQP: 0x4242},
		}
		h.ImmDt.Imm = 9
		return wire.AppendPad(append(wire.AppendHeaders(nil, &h), payload...), h.BTH.PadCount)
	}
	return []fuzzSeed{
		{"uc_send_first_middle_last", seq(0, uc(wire.UCSendFirst, 0, full, nil), uc(wire.UCSendMiddle, 1, full, nil),
			uc(wire.UCSendLastWithImmediate, 2, full[:7], nil))},
		{"uc_gap_then_first", seq(0, uc(wire.UCSendFirst, 0, full, nil), uc(wire.UCSendLast, 2, full[:9], nil),
			uc(wire.UCSendFirst, 3, full, nil), uc(wire.UCSendLast, 4, full[:9], nil))},
		{"uc_write_first_last_imm", seq(2, uc(wire.UCRDMAWriteFirst, 0, full, reth(0, 300)), uc(wire.UCRDMAWriteLastWithImmediate, 1, full[:44], nil))},
		{"uc_write_only_bad_rkey", seq(0, uc(wire.UCRDMAWriteOnly, 0, full[:8], func(h *wire.Headers) {
			h.RETH = wire.RETHFields{VA: 0, RKey: 0x25A, DMALength: 8}
		}), uc(wire.UCSendOnly, 1, full[:8], nil))},
		{"ud_send_only", seq(1, ud(wire.UDSendOnly, fuzzQKey, full[:100]), ud(wire.UDSendOnlyWithImmediate, fuzzQKey, full))},
		{"ud_wrong_qkey", seq(3, ud(wire.UDSendOnly, fuzzQKey+1, full[:4]), ud(wire.UDSendOnly, fuzzQKey, nil))},
	}
}
