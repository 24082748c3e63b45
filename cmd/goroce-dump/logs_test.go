package main

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/pcap"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/internal/wire"
)

// The captures come with the output of the tools that made the traffic:
// each side prints its QPN and starting PSN and, for RDMA tests, the rkey and
// address of its buffer. These tests read those logs and check that the
// decoded packets carry the same values, which proves the dump decodes the
// fields the peers agreed on, not just something that looks plausible.

// endpoint is one side of a connection as a tool's log describes it.
type endpoint struct {
	addr    netip.Addr
	qpn     uint32
	psn     uint32
	rkey    uint32
	vaddr   uint64
	hasRKey bool
}

var (
	// perftest: " local address: LID 0000 QPN 0x0028 PSN 0x4b7ae6 [OUT 0x80] [RKey 0x001ed4 VAddr 0x00558b68537000]"
	// followed by " GID: 00:00:...:255:255:10:99:00:02" (16 decimal bytes).
	perftestAddr = regexp.MustCompile(`^\s*(?:local|remote) address: LID \S+ QPN 0x([0-9a-f]+) PSN 0x([0-9a-f]+)(?: OUT 0x[0-9a-f]+)?(?: RKey 0x([0-9a-f]+) VAddr 0x([0-9a-f]+))?\s*$`)
	perftestGID  = regexp.MustCompile(`^\s*GID: ((?:\d+:){15}\d+)\s*$`)
	// ibv_*_pingpong: "  local address:  LID 0x0000, QPN 0x000025, PSN 0xce973c, GID ::ffff:10.99.0.2"
	// (ud_pingpong prints "PSN 0x5ba528: GID").
	pingpongAddr = regexp.MustCompile(`^\s*(?:local|remote) address:\s+LID 0x[0-9a-f]+, QPN 0x([0-9a-f]+), PSN 0x([0-9a-f]+)[,:] GID (\S+)\s*$`)
	// The raw ibv_rc_pingpong exchange, as fake_pingpong_oob.py logs it:
	// "client says: 0000:000032:b7580e:00000000000000000000ffff0a630002 from (...)".
	oobMessage = regexp.MustCompile(`^(?:client says|answered\s*): [0-9a-f]{4}:([0-9a-f]{6}):([0-9a-f]{6}):([0-9a-f]{32})\b`)
)

// parseLog returns the endpoints a log describes, by IP address. Both sides
// print both endpoints; parseLog fails if they disagree.
func parseLog(r io.Reader) (map[netip.Addr]endpoint, error) {
	eps := map[netip.Addr]endpoint{}
	add := func(e endpoint) error {
		if old, ok := eps[e.addr]; ok && old != e {
			return fmt.Errorf("%v described twice: %+v and %+v", e.addr, old, e)
		}
		eps[e.addr] = e
		return nil
	}
	hex := func(s string) uint64 {
		v, _ := strconv.ParseUint(s, 16, 64) // the regexps admit hex digits only
		return v
	}
	sc := bufio.NewScanner(r)
	var pending *endpoint // a perftest address line waiting for its GID line
	for sc.Scan() {
		line := sc.Text()
		if m := perftestAddr.FindStringSubmatch(line); m != nil {
			pending = &endpoint{qpn: uint32(hex(m[1])), psn: uint32(hex(m[2]))}
			if m[3] != "" {
				pending.rkey, pending.vaddr, pending.hasRKey = uint32(hex(m[3])), hex(m[4]), true
			}
			continue
		}
		if m := perftestGID.FindStringSubmatch(line); m != nil && pending != nil {
			var gid [16]byte
			for i, f := range strings.Split(m[1], ":") {
				v, err := strconv.ParseUint(f, 10, 8)
				if err != nil {
					return nil, fmt.Errorf("GID %q: %v", m[1], err)
				}
				gid[i] = byte(v)
			}
			pending.addr = netip.AddrFrom16(gid).Unmap()
			if err := add(*pending); err != nil {
				return nil, err
			}
			pending = nil
			continue
		}
		if m := pingpongAddr.FindStringSubmatch(line); m != nil {
			a, err := netip.ParseAddr(m[3])
			if err != nil {
				return nil, err
			}
			if err := add(endpoint{addr: a.Unmap(), qpn: uint32(hex(m[1])), psn: uint32(hex(m[2]))}); err != nil {
				return nil, err
			}
			continue
		}
		if m := oobMessage.FindStringSubmatch(line); m != nil {
			var gid [16]byte
			for i := range gid {
				gid[i] = byte(hex(m[3][2*i : 2*i+2]))
			}
			if err := add(endpoint{addr: netip.AddrFrom16(gid).Unmap(), qpn: uint32(hex(m[1])), psn: uint32(hex(m[2]))}); err != nil {
				return nil, err
			}
		}
	}
	return eps, sc.Err()
}

func TestParseLog(t *testing.T) {
	a2, a3 := netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.3")
	tests := []struct {
		name string
		log  string
		want map[netip.Addr]endpoint
	}{
		{"perftest with keys", ` local address: LID 0000 QPN 0x0028 PSN 0x4b7ae6 RKey 0x001ed4 VAddr 0x00558b68537000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:99:00:02
 remote address: LID 0000 QPN 0x0014 PSN 0x5a0cae RKey 0x00054c VAddr 0x00561cb6110000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:99:00:03
`, map[netip.Addr]endpoint{
			a2: {addr: a2, qpn: 0x28, psn: 0x4b7ae6, rkey: 0x1ed4, vaddr: 0x558b68537000, hasRKey: true},
			a3: {addr: a3, qpn: 0x14, psn: 0x5a0cae, rkey: 0x54c, vaddr: 0x561cb6110000, hasRKey: true},
		}},
		{"perftest read with OUT", ` local address: LID 0000 QPN 0x0029 PSN 0x91248e OUT 0x80 RKey 0x001ff4 VAddr 0x00561a42cc7000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:99:00:02
`, map[netip.Addr]endpoint{a2: {addr: a2, qpn: 0x29, psn: 0x91248e, rkey: 0x1ff4, vaddr: 0x561a42cc7000, hasRKey: true}}},
		{"perftest without keys, short PSN", ` remote address: LID 0000 QPN 0x0018 PSN 0xbaa74
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:99:00:03
`, map[netip.Addr]endpoint{a3: {addr: a3, qpn: 0x18, psn: 0xbaa74}}},
		{"pingpong", `  local address:  LID 0x0000, QPN 0x000025, PSN 0xce973c, GID ::ffff:10.99.0.2
  remote address: LID 0x0000, QPN 0x000011, PSN 0x2812e2, GID ::ffff:10.99.0.3
`, map[netip.Addr]endpoint{a2: {addr: a2, qpn: 0x25, psn: 0xce973c}, a3: {addr: a3, qpn: 0x11, psn: 0x2812e2}}},
		{"ud pingpong colon", `  local address:  LID 0x0000, QPN 0x000027, PSN 0x5ba528: GID ::ffff:10.99.0.2
`, map[netip.Addr]endpoint{a2: {addr: a2, qpn: 0x27, psn: 0x5ba528}}},
		{"oob exchange", `client says: 0000:000032:b7580e:00000000000000000000ffff0a630002 from ('10.99.0.2', 33434)
answered   : 0000:000abc:000123:00000000000000000000ffff0a630001
`, map[netip.Addr]endpoint{a2: {addr: a2, qpn: 0x32, psn: 0xb7580e}, netip.MustParseAddr("10.99.0.1"): {addr: netip.MustParseAddr("10.99.0.1"), qpn: 0xabc, psn: 0x123}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseLog(strings.NewReader(tc.log))
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	if _, err := parseLog(strings.NewReader(`  local address:  LID 0x0000, QPN 0x000025, PSN 0xce973c, GID ::ffff:10.99.0.2
  remote address: LID 0x0000, QPN 0x000026, PSN 0xce973c, GID ::ffff:10.99.0.2
`)); err == nil {
		t.Error("contradicting descriptions of one endpoint accepted")
	}
}

// seenPacket is what the log checks need of a decoded packet; the decoder
// reuses its buffers, so the values are copied out.
type seenPacket struct {
	index    int
	src, dst netip.Addr
	info     wire.OpInfo
	opcode   wire.Opcode
	destQP   uint32
	psn      psn.PSN
	reth     *wire.RETHFields
	srcQP    uint32 // DETH
	hasDETH  bool
}

// decodeCapture decodes every RoCEv2 packet of a capture with the dump's
// decoder, failing on any malformed packet or bad ICRC.
func decodeCapture(t *testing.T, path string) []seenPacket {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcap.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	d := decoder{opt: &options{port: wire.RoCEv2Port}, linkType: r.LinkType()}
	var pkts []seenPacket
	for i := 1; ; i++ {
		rec, err := r.Next()
		if err == io.EOF {
			return pkts
		}
		if err != nil {
			t.Fatal(err)
		}
		p, k := d.decode(i, 0, rec)
		if k != kindRoCE {
			continue
		}
		if p.malformed() || p.icrcBad() {
			t.Fatalf("frame %d: malformed %v/%v, icrc got %#x want %#x", i, p.frameErr, p.parseErr, p.icrcGot, p.icrcWant)
		}
		sp := seenPacket{
			index: i, src: p.frame.Src, dst: p.frame.Dst, info: p.pkt.Info(), opcode: p.pkt.BTH.Opcode(),
			destQP: uint32(p.pkt.BTH.DestQP()), psn: p.pkt.BTH.PSN(),
		}
		if p.pkt.RETH != nil {
			f := p.pkt.RETH.Fields()
			sp.reth = &f
		}
		if p.pkt.DETH != nil {
			sp.srcQP, sp.hasDETH = uint32(p.pkt.DETH.SrcQP()), true
		}
		pkts = append(pkts, sp)
	}
}

// TestCapturesAgreeWithLogs checks, for every capture with a log, the
// connection parameters the tools printed against the packets:
//
//   - every request from one side to the other goes to the peer's QPN (the
//     rdma_cm captures also carry perftest's own control QPs, which are
//     skipped) and a UD request names the sender's QPN in its DETH;
//   - the first request carries the sender's starting PSN (rdma_cm picks
//     the PSN itself, so not there);
//   - a RETH carries the peer's rkey and an address in the peer's buffer,
//     the first one exactly the buffer's start;
//   - every response goes to the requester's QPN with a PSN the requester
//     sent (read responses run up to a few PSNs past their request's).
func TestCapturesAgreeWithLogs(t *testing.T) {
	const client, server, host = "10.99.0.2", "10.99.0.3", "10.99.0.1"
	tests := []struct {
		capture       string
		client        string // the side that starts; "server" is the other
		server        string
		bidirectional bool // both sides send requests (latency tests, pingpong)
		rdmacm        bool // QPs and PSNs set up by rdma_cm
		wantRETH      bool // the client's requests carry a RETH
	}{
		{capture: "write_bw", client: client, server: server, wantRETH: true},
		{capture: "read_bw", client: client, server: server, wantRETH: true},
		{capture: "send_bw", client: client, server: server},
		{capture: "atomic_fadd", client: client, server: server},
		{capture: "atomic_cswap", client: client, server: server},
		{capture: "write_lat", client: client, server: server, bidirectional: true, wantRETH: true},
		{capture: "send_lat", client: client, server: server, bidirectional: true},
		{capture: "rc_pingpong", client: client, server: server, bidirectional: true},
		{capture: "uc_pingpong", client: client, server: server, bidirectional: true},
		{capture: "ud_pingpong", client: client, server: server, bidirectional: true},
		{capture: "write_bw_rdmacm", client: client, server: server, rdmacm: true},
		{capture: "vm_to_host_unanswered", client: client, server: host},
	}
	for _, tc := range tests {
		t.Run(tc.capture, func(t *testing.T) {
			logFile, err := os.Open(filepath.Join(testkit.CapturesDir(), tc.capture+".log"))
			if err != nil {
				t.Skipf("log not available: %v", err)
			}
			defer logFile.Close()
			eps, err := parseLog(logFile)
			if err != nil {
				t.Fatal(err)
			}
			c, okc := eps[netip.MustParseAddr(tc.client)]
			s, oks := eps[netip.MustParseAddr(tc.server)]
			if !okc || !oks {
				t.Fatalf("log does not describe both %s and %s: %+v", tc.client, tc.server, eps)
			}
			pkts := decodeCapture(t, capture(t, tc.capture+".pcap"))
			n := checkDirection(t, pkts, c, s, tc.rdmacm)
			if tc.wantRETH && n == 0 {
				t.Errorf("no RETH from %v checked", c.addr)
			}
			if tc.bidirectional {
				checkDirection(t, pkts, s, c, tc.rdmacm)
			}
		})
	}
}

// checkDirection checks the requests from→to and their responses, and
// returns how many RETHs it checked.
func checkDirection(t *testing.T, pkts []seenPacket, from, to endpoint, rdmacm bool) (reths int) {
	t.Helper()
	// perftest's buffers are at most a few pages here; 1 MiB bounds "in
	// the peer's buffer" without knowing the exact size.
	const bufferBound = 1 << 20
	var reqs []seenPacket
	for _, p := range pkts {
		if p.src != from.addr || p.dst != to.addr || !p.info.IsRequest() || p.destQP == uint32(wire.GSIQPN) {
			continue
		}
		if rdmacm && p.destQP != to.qpn {
			continue // perftest's rdma_cm control QPs
		}
		if p.destQP != to.qpn {
			t.Errorf("frame %d: %v → %v %v to QPN %#x, want the peer's %#x", p.index, from.addr, to.addr, p.opcode, p.destQP, to.qpn)
		}
		if p.hasDETH && p.srcQP != from.qpn {
			t.Errorf("frame %d: DETH SrcQP %#x, want the sender's %#x", p.index, p.srcQP, from.qpn)
		}
		if p.reth != nil && to.hasRKey {
			if p.reth.RKey != to.rkey || p.reth.VA < to.vaddr || p.reth.VA >= to.vaddr+bufferBound {
				t.Errorf("frame %d: RETH rkey %#x va %#x, want rkey %#x in the buffer at %#x", p.index, p.reth.RKey, p.reth.VA, to.rkey, to.vaddr)
			}
			if reths == 0 && p.reth.VA != to.vaddr {
				t.Errorf("frame %d: first RETH va %#x, want the buffer start %#x", p.index, p.reth.VA, to.vaddr)
			}
			reths++
		}
		reqs = append(reqs, p)
	}
	if len(reqs) == 0 {
		t.Fatalf("no request from %v to %v (QPN %#x)", from.addr, to.addr, to.qpn)
	}
	first := reqs[0].psn
	if !rdmacm && first != psn.PSN(from.psn) {
		t.Errorf("frame %d: first request PSN %#x, want %v's starting PSN %#x", reqs[0].index, uint32(first), from.addr, from.psn)
	}
	last := reqs[len(reqs)-1].psn
	for _, p := range pkts {
		if p.src != to.addr || p.dst != from.addr || !p.info.IsResponse() {
			continue
		}
		if rdmacm && p.destQP != from.qpn {
			continue // acknowledgements on the control QPs
		}
		if p.destQP != from.qpn {
			t.Errorf("frame %d: %v to QPN %#x, want the requester's %#x", p.index, p.opcode, p.destQP, from.qpn)
		}
		if p.psn.Sub(first) < 0 || last.Sub(p.psn) < -16 {
			t.Errorf("frame %d: %v PSN %#x outside the requests' %#x..%#x", p.index, p.opcode, uint32(p.psn), uint32(first), uint32(last))
		}
	}
	return reths
}
