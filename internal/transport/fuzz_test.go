package transport

import (
	"encoding/binary"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/ibv"
	"github.com/goroce/goroce/internal/wire"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite testdata/fuzz/FuzzHandlePacket and FuzzSelectiveRepeat from fuzzSeeds")

// TestFuzzSeeds checks that the committed seed corpus is what fuzzSeeds
// builds, so that the seeds follow changes of the harness; run with
// -update-seeds to rewrite it.
func TestFuzzSeeds(t *testing.T) {
	checkSeeds(t, "FuzzHandlePacket", fuzzSeeds())
	checkSeeds(t, "FuzzSelectiveRepeat", append(fuzzSeeds(), srFuzzSeeds()...))
}

func checkSeeds(t *testing.T, target string, seeds []fuzzSeed) {
	dir := filepath.Join("testdata", "fuzz", target)
	for _, s := range seeds {
		file := filepath.Join(dir, s.name)
		want := "go test fuzz v1\n[]byte(" + strconv.Quote(string(s.data)) + ")\n"
		if *updateSeeds {
			must(t, os.MkdirAll(dir, 0o755))
			must(t, os.WriteFile(file, []byte(want), 0o644))
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil || string(got) != want {
			t.Errorf("%s is stale or missing (%v); run go test -run TestFuzzSeeds -update-seeds", file, err)
		}
	}
}

// fuzzPackets splits a fuzz input into packets, each prefixed by its length
// (2 bytes, big-endian) and a time step in microseconds (1 byte).
func fuzzPackets(data []byte, fn func(step time.Duration, pkt []byte)) {
	for n := 0; len(data) >= 3 && n < 16; n++ {
		l := int(binary.BigEndian.Uint16(data))
		step := time.Duration(data[2]) * time.Microsecond
		data = data[3:]
		l = min(l, len(data))
		fn(step, data[:l])
		data = data[l:]
	}
}

// FuzzHandlePacket feeds sequences of arbitrary packets (network bytes, as
// parsed by wire.Packet.Parse) to a QP pair with work in progress: requests
// to the responder, responses to the requester. Whatever arrives, the QPs
// must not panic, must release every Ref, and must complete every work
// request at most once.
func FuzzHandlePacket(f *testing.F) {
	// The seeds are in testdata/fuzz/FuzzHandlePacket (see TestFuzzSeeds).
	f.Fuzz(func(t *testing.T, data []byte) { fuzzPair(t, data, false) })
}

// FuzzSelectiveRepeat is FuzzHandlePacket with selective repeat on both
// QPs: out-of-order requests are held and replayed, and SACKs (a new
// parser of network bytes: their bitmap) reach the requester. The same
// must hold. Seeds: testdata/fuzz/FuzzSelectiveRepeat (TestFuzzSeeds).
func FuzzSelectiveRepeat(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { fuzzPair(t, data, true) })
}

// fuzzPair runs a fuzz input against a pair with work in progress.
func fuzzPair(t *testing.T, data []byte, sr bool) {
	{
		o := defaultOpts()
		o.mtu = 256
		o.rdAtomic = 2
		o.sr = sr
		a, b := newPair(t, o)
		now := time.Unix(1_000_000, 0)
		local := make([]byte, 4096)
		lkey := a.mem.register(pd, local, 0, ibv.AccessLocalWrite)
		remote := make([]byte, 4096)
		rkey := b.mem.register(pd, remote, 0, ibv.AccessLocalWrite|ibv.AccessRemoteWrite|ibv.AccessRemoteRead|ibv.AccessRemoteAtomic)
		if rkey != 0x15A || lkey != 0x15A {
			t.Fatal("keys changed; update the seeds")
		}
		for i := range 3 {
			must(t, b.qp.PostRecv(&RecvWQE{WRID: uint64(i), SGL: []SGE{{uint64(i) * 1024, 1024, rkey}}}))
		}
		posts := []SendWQE{
			{WRID: 0, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled, SGL: []SGE{{0, 600, lkey}}, RKey: 0x15A},
			{WRID: 1, Opcode: ibv.WRRDMARead, Flags: ibv.SendSignaled, SGL: []SGE{{1024, 600, lkey}}, RKey: 0x15A},
			{WRID: 2, Opcode: ibv.WRAtomicFetchAndAdd, SGL: []SGE{{2048, 8, lkey}}, RKey: 0x15A, CompareAdd: 1},
			{WRID: 3, Opcode: ibv.WRSendWithImm, SGL: []SGE{{3072, 300, lkey}}},
		}
		for i := range posts {
			must(t, a.qp.PostSend(&posts[i], now, &a.out))
		}
		a.out.Reset()
		var pkt wire.Packet
		buf := make([]byte, 0, 8192)
		fuzzPackets(data, func(step time.Duration, raw []byte) {
			now = now.Add(step)
			buf = append(append(buf[:0], raw...), 0, 0, 0, 0) // the ICRC, unchecked here
			if pkt.Parse(buf, 0) != nil {
				return
			}
			to := b
			if pkt.Info().IsResponse() {
				to = a
			}
			pkt.BTH.SetDestQP(wire.QPN(to.qp.QPN()))
			to.qp.HandlePacket(&pkt, now, &to.out)
			for _, e := range []*endpoint{a, b} {
				e.qp.OnTimer(now, &e.out)
				for _, p := range e.out.Packets() {
					if err := pkt.Parse(append(append(buf[:0], p.Bytes...), 0, 0, 0, 0), e.qp.PathMTU()); err != nil {
						t.Fatalf("%s sent an invalid packet: %v", e.name, err)
					}
				}
				e.out.Reset()
			}
		})
		for _, e := range []*endpoint{a, b} {
			if e.mem.refs != 0 {
				t.Fatalf("%s: %d Refs not released", e.name, e.mem.refs)
			}
			for _, cq := range []*testCQ{e.scq, e.rcq} {
				seen := map[uint64]bool{}
				for _, c := range cq.c {
					if seen[c.WRID] {
						t.Fatalf("%s: WR %d completed twice: %+v", e.name, c.WRID, cq.c)
					}
					seen[c.WRID] = true
				}
			}
			if s := e.qp.Snapshot(); s.SQDepth < 0 || s.SQDepth > 4 || s.RdAtomicOut < 0 || s.RdAtomicOut > 2 {
				t.Fatalf("%s: %+v", e.name, s)
			}
		}
		// Flushing completes everything not completed yet, once.
		a.qp.Flush()
		b.qp.Flush()
		if n := len(a.scq.c); n != 4 && !(n < 4 && a.qp.Snapshot().SQDepth == 0) {
			t.Fatalf("%d send completions after flush", n)
		}
	}
}

type fuzzSeed struct {
	name string
	data []byte
}

// fuzzSeeds returns inputs that drive the pair through its main paths.
func fuzzSeeds() []fuzzSeed {
	p := func(op wire.Opcode, n uint32, ack bool, payload []byte, set func(h *wire.Headers)) []byte {
		return req(op, base.Add(n), ack, payload, set)
	}
	resp := func(op wire.Opcode, n uint32, syn wire.AETHSyndrome, payload []byte, set func(h *wire.Headers)) []byte {
		h := wire.Headers{BTH: wire.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: qpnA, PSN: base.Add(n),
			PadCount: wire.PadCount(len(payload))}, AETH: wire.AETHFields{Syndrome: syn}}
		if set != nil {
			set(&h)
		}
		return wire.AppendPad(append(wire.AppendHeaders(nil, &h), payload...), h.BTH.PadCount)
	}
	seq := func(pkts ...[]byte) []byte {
		var b []byte
		for _, x := range pkts {
			b = binary.BigEndian.AppendUint16(b, uint16(len(x)))
			b = append(b, 10)
			b = append(b, x...)
		}
		return b
	}
	reth := func(va uint64, l uint32) func(h *wire.Headers) {
		return func(h *wire.Headers) { h.RETH = wire.RETHFields{VA: va, RKey: 0x15A, DMALength: l} }
	}
	full := make([]byte, 256)
	ack := wire.SyndromeAckUnlimited
	return []fuzzSeed{
		// Requests to b.
		{"write_first_last", seq(p(wire.RCRDMAWriteFirst, 0, false, full, reth(0, 300)), p(wire.RCRDMAWriteLast, 1, true, full[:44], nil))},
		{"send_first_middle_last_imm", seq(p(wire.RCSendFirst, 0, false, full, nil), p(wire.RCSendMiddle, 1, false, full, nil),
			p(wire.RCSendLastWithImmediate, 2, true, full[:3], nil))},
		{"read_and_duplicate", seq(p(wire.RCRDMAReadRequest, 0, true, nil, reth(8, 700)), p(wire.RCRDMAReadRequest, 0, true, nil, reth(8, 700)))},
		{"fetch_add_compare_swap", seq(
			p(wire.RCFetchAdd, 0, true, nil, func(h *wire.Headers) { h.AtomicETH = wire.AtomicETHFields{VA: 16, RKey: 0x15A, SwapAdd: 5} }),
			p(wire.RCCompareSwap, 1, true, nil, func(h *wire.Headers) { h.AtomicETH = wire.AtomicETHFields{VA: 16, RKey: 0x15A, Compare: 5} }))},
		{"flush_atomic_write_replay", seq(
			p(wire.RCFlush, 0, true, nil, func(h *wire.Headers) { reth(0, 64)(h); h.FETH.SelectivityLevel = uint8(ibv.FlushRange) }),
			p(wire.RCAtomicWrite, 1, true, full[:8], reth(8, 8)), p(wire.RCAtomicWrite, 1, true, full[:8], reth(8, 8)),
			p(wire.RCFlush, 0, true, nil, reth(0, 64)),
			p(wire.RCFlush, 2, true, nil, func(h *wire.Headers) { reth(0, 0)(h); h.FETH.PlacementType = uint8(ibv.FlushGlobal) }))},
		{"send_ahead_then_expected", seq(p(wire.RCSendOnly, 2, true, full[:5], nil), p(wire.RCSendOnly, 0, true, full[:5], nil))},
		// Responses to a (WRITE at +0..+2, READ at +3..+5, FETCH_ADD at +6, SEND at +7..+8).
		{"ack_read_atomic_ack", seq(resp(wire.RCAcknowledge, 2, ack, nil, nil),
			resp(wire.RCRDMAReadResponseFirst, 3, ack, full, nil), resp(wire.RCRDMAReadResponseMiddle, 4, 0, full, nil),
			resp(wire.RCRDMAReadResponseLast, 5, ack, full[:88], nil),
			resp(wire.RCAtomicAcknowledge, 6, ack, nil, func(h *wire.Headers) { h.AtomicAckETH.OrigData = 42 }),
			resp(wire.RCAcknowledge, 8, ack, nil, nil))},
		{"sequence_nak_rnr_nak", seq(resp(wire.RCAcknowledge, 1, wire.NakSyndrome(wire.NAKPSNSequenceError), nil, nil),
			resp(wire.RCAcknowledge, 3, wire.RNRNakSyndrome(1), nil, nil))},
		{"remote_access_nak", seq(resp(wire.RCAcknowledge, 3, wire.NakSyndrome(wire.NAKRemoteAccessError), nil, nil))},
		{"read_response_bad_length", seq(resp(wire.RCRDMAReadResponseOnly, 3, ack, full[:100], nil))},
	}
}

// srFuzzSeeds are the seeds of FuzzSelectiveRepeat besides fuzzSeeds':
// SACKs and requests out of order, in the shapes selective repeat sends.
func srFuzzSeeds() []fuzzSeed {
	sack := func(n uint32, syn wire.AETHSyndrome, bitmap []byte) []byte {
		h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCSACK, PKey: 0xFFFF, DestQP: qpnA, PSN: base.Add(n)},
			AETH: wire.AETHFields{Syndrome: syn}}
		return append(wire.AppendHeaders(nil, &h), bitmap...)
	}
	seq := func(pkts ...[]byte) []byte {
		var b []byte
		for _, x := range pkts {
			b = binary.BigEndian.AppendUint16(b, uint16(len(x)))
			b = append(b, 10)
			b = append(b, x...)
		}
		return b
	}
	full := make([]byte, 256)
	ack := wire.SyndromeAckUnlimited
	return []fuzzSeed{
		// WRITE at +0..+2, READ at +3..+5, FETCH_ADD at +6, SEND at +7..+8.
		{"sack_write_gap", seq(sack(1, ack, []byte{0x01, 0, 0, 0}))},
		{"sack_read_lost", seq(sack(3, ack, []byte{0x0F, 0, 0, 0}), sack(3, ack, []byte{0xFF, 0xFF, 0xFF, 0xFF}))},
		{"sack_wide_then_ack", seq(sack(0, ack, full[:128]), sack(2, ack, []byte{0xFF, 0, 0, 0, 0, 0, 0, 0}))},
		{"sack_nak_syndrome", seq(sack(1, wire.NakSyndrome(wire.NAKPSNSequenceError), []byte{0x02, 0, 0, 0}))},
		{"sack_ahead", seq(sack(40, ack, []byte{0x01, 0, 0, 0}))},
		{"write_last_before_first", seq(req(wire.RCRDMAWriteLast, base.Add(1), true, full[:44], nil),
			req(wire.RCRDMAWriteFirst, base, false, full, func(h *wire.Headers) {
				h.RETH = wire.RETHFields{VA: 0, RKey: 0x15A, DMALength: 300}
			}))},
		{"sends_reversed", seq(req(wire.RCSendOnly, base.Add(3), true, full[:9], nil), req(wire.RCSendOnly, base.Add(2), false, full[:7], nil),
			req(wire.RCSendOnly, base.Add(1), true, full[:5], nil), req(wire.RCSendOnly, base, false, full[:3], nil))},
		{"atomic_held_then_replayed", seq(req(wire.RCFetchAdd, base.Add(1), true, nil, func(h *wire.Headers) {
			h.AtomicETH = wire.AtomicETHFields{VA: 16, RKey: 0x15A, SwapAdd: 5}
		}), req(wire.RCSendOnly, base, true, full[:3], nil), req(wire.RCFetchAdd, base.Add(1), true, nil, func(h *wire.Headers) {
			h.AtomicETH = wire.AtomicETHFields{VA: 16, RKey: 0x15A, SwapAdd: 5}
		}))},
	}
}
