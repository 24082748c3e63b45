package mad

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
)

// Wireshark's InfiniBand dissector is the independent decoder these tests
// compare with. tshark's JSON output for the CM MADs of each pcap is kept
// in testdata/tshark (go test -run TestTshark -update rewrites it from the
// installed tshark); TestTsharkGolden checks every field of it against this
// package's decoding, TestTsharkLive checks the golden files against the
// installed tshark when there is one.

var update = flag.Bool("update", false, "rewrite testdata/tshark from the installed tshark")

// tsharkSkip are the fields not compared: reserved bits, whole-buffer
// views, and the REQ flow label and packet rate, which Wireshark 4.0 reads
// wrongly (it applies their 32-bit masks to fewer bytes: in rping.pcap it
// shows flow label 0x9ea and rate 0x1e where the bytes hold 0x9ea0d and 0).
var tsharkSkip = []string{"infiniband.reserved", "infiniband.mad.data", "infiniband.smplid.smpdata",
	"infiniband.cm.req.prim_flowlabel", "infiniband.cm.req.prim_pktrate", "infiniband.cm.req.prim_reserved0",
	"infiniband.cm.req.alt_flowlabel", "infiniband.cm.req.alt_pktrate", "infiniband.cm.req.alt_reserved0",
	"infiniband.cm.req.prim_reserved1", "infiniband.cm.req.prim_reserved2", "infiniband.cm.req.alt_reserved1",
	"infiniband.cm.rep.reserved", "infiniband.cm.rej.reserved0", "infiniband.cm.rej.reserved1",
	"infiniband.cm.req.ip_cm.reserved", "infiniband.cm.req.ip_cm", "infiniband.cm.req.serviceid.prefix",
}

// tsharkPcaps are the files compared: the two rdma_cm captures and the
// pcap of crafted MADs (testdata/crafted.pcap, TestCraftedPcap).
func tsharkPcaps(t *testing.T) []string {
	files := []string{filepath.Join("testdata", "crafted.pcap")}
	for _, f := range cmCaptures {
		p := filepath.Join(testkit.CapturesDir(), f)
		if _, err := os.Stat(p); err == nil {
			files = append(files, p)
		} else {
			t.Logf("capture %s absent: not compared", p)
		}
	}
	return files
}

func goldenPath(pcapPath string) string {
	return filepath.Join("testdata", "tshark", strings.TrimSuffix(filepath.Base(pcapPath), ".pcap")+".json")
}

// runTshark returns, per frame carrying a CM MAD, the flattened
// infiniband.mad.* and infiniband.cm.* fields tshark shows.
func runTshark(t *testing.T, pcapPath string) map[string]map[string]string {
	out, err := exec.Command("tshark", "-r", pcapPath, "-T", "json", "-Y", "infiniband.mad.mgmtclass == 7").Output()
	if err != nil {
		t.Fatalf("tshark %s: %v", pcapPath, err)
	}
	var frames []struct {
		Source struct {
			Layers map[string]json.RawMessage `json:"layers"`
		} `json:"_source"`
	}
	if err := json.Unmarshal(out, &frames); err != nil {
		t.Fatal(err)
	}
	res := make(map[string]map[string]string)
	for _, f := range frames {
		var frame struct {
			Number string `json:"frame.number"`
		}
		if err := json.Unmarshal(f.Source.Layers["frame"], &frame); err != nil {
			t.Fatal(err)
		}
		var ib map[string]any
		if err := json.Unmarshal(f.Source.Layers["infiniband"], &ib); err != nil {
			t.Fatal(err)
		}
		fields := make(map[string]string)
		flatten(ib, fields)
		res[frame.Number] = fields
	}
	return res
}

func flatten(o map[string]any, into map[string]string) {
	for k, v := range o {
		switch v := v.(type) {
		case map[string]any:
			flatten(v, into)
		case string:
			if strings.HasPrefix(k, "infiniband.cm") || strings.HasPrefix(k, "infiniband.mad") {
				into[k] = v
			}
		}
	}
}

func TestTsharkLive(t *testing.T) {
	if testing.Short() && !*update {
		t.Skip("runs tshark")
	}
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark not installed")
	}
	for _, p := range tsharkPcaps(t) {
		got := runTshark(t, p)
		if *update {
			b, err := json.MarshalIndent(got, "", "\t")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(goldenPath(p), append(b, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want := readGolden(t, p)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: the installed tshark disagrees with %s; rerun with -update and review", p, goldenPath(p))
		}
	}
}

func readGolden(t *testing.T, pcapPath string) map[string]map[string]string {
	b, err := os.ReadFile(goldenPath(pcapPath))
	if err != nil {
		t.Fatal(err)
	}
	var g map[string]map[string]string
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestTsharkGolden(t *testing.T) {
	compared := 0
	for _, p := range tsharkPcaps(t) {
		golden := readGolden(t, p)
		mads := readMADs(t, p)
		if len(mads) != len(golden) {
			t.Fatalf("%s: %d CM MADs, tshark saw %d", p, len(mads), len(golden))
		}
		for _, fm := range mads {
			want, ok := golden[fmt.Sprint(fm.frame)]
			if !ok {
				t.Fatalf("%v: not in the golden file", fm)
			}
			got := ourFields(t, fm.mad)
			for k, v := range want {
				if slices.Contains(tsharkSkip, k) {
					continue
				}
				g, ok := got[k]
				if !ok {
					t.Errorf("%v: tshark shows %s = %s, which this test does not map", fm, k, v)
					continue
				}
				if g != v {
					t.Errorf("%v: %s: tshark %s, mad %s", fm, k, v, g)
				}
				compared++
			}
			for k, v := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("%v: mad gives %s = %s, tshark shows no such field", fm, k, v)
				}
			}
		}
	}
	t.Logf("%d field values agree with tshark", compared)
}

func hex8(v uint8) string   { return fmt.Sprintf("0x%02x", v) }
func hex16(v uint16) string { return fmt.Sprintf("0x%04x", v) }
func hex24(v uint32) string { return fmt.Sprintf("0x%06x", v) }
func hex32(v uint32) string { return fmt.Sprintf("0x%08x", v) }
func hex64(v uint64) string { return fmt.Sprintf("0x%016x", v) }
func flag8(v bool) string {
	if v {
		return "0x01"
	}
	return "0x00"
}

// colons formats bytes as tshark's JSON shows FT_BYTES.
func colons(b []byte) string {
	var s strings.Builder
	for i, x := range b {
		if i > 0 {
			s.WriteByte(':')
		}
		fmt.Fprintf(&s, "%02x", x)
	}
	return s.String()
}

// ourFields decodes mad and names its values as tshark names them.
func ourFields(t *testing.T, mad []byte) map[string]string {
	h, m, err := Decode(mad)
	if err != nil {
		t.Fatal(err)
	}
	f := map[string]string{
		"infiniband.mad.baseversion":       hex8(h.BaseVersion),
		"infiniband.mad.mgmtclass":         hex8(h.MgmtClass),
		"infiniband.mad.classversion":      hex8(h.ClassVersion),
		"infiniband.mad.method":            hex8(uint8(h.Method)),
		"infiniband.mad.status":            hex16(h.Status),
		"infiniband.mad.classspecific":     hex16(h.ClassSpecific),
		"infiniband.mad.transactionid":     hex64(h.TID),
		"infiniband.mad.attributeid":       hex16(uint16(h.AttrID)),
		"infiniband.mad.attributemodifier": hex32(h.AttrMod),
		"infiniband.mad":                   colons(mad),
	}
	switch m := m.(type) {
	case *REQ:
		reqFieldsOf(m, f)
	case *REP:
		p := "infiniband.cm.rep"
		f[p] = hex32(m.LocalCommID)
		f[p+".remotecommid"] = hex32(m.RemoteCommID)
		f[p+".localqkey"] = hex32(m.LocalQKey)
		f[p+".localqpn"] = hex24(m.LocalQPN)
		f[p+".localeecn"] = hex24(m.LocalEECN)
		f[p+".startpsn"] = hex24(m.StartingPSN)
		f[p+".respres"] = hex8(m.ResponderResources)
		f[p+".initdepth"] = hex8(m.InitiatorDepth)
		f[p+".tgtackdelay"] = hex8(m.TargetACKDelay)
		f[p+".failoveracc"] = hex8(m.FailoverAccepted)
		f[p+".e2eflowctrl"] = flag8(m.EndToEndFlowControl)
		f[p+".rnrretrcount"] = hex8(m.RNRRetryCount)
		f[p+".srq"] = flag8(m.SRQ)
		f[p+".localcaguid"] = hex64(m.LocalCAGUID)
		f[p+".private"] = colons(m.PrivateData)
	case *RTU:
		f["infiniband.cm.rtu.localcommid"] = hex32(m.LocalCommID)
		f["infiniband.cm.rtu.remotecommid"] = hex32(m.RemoteCommID)
		f["infiniband.cm.rtu.private"] = colons(m.PrivateData)
	case *REJ:
		p := "infiniband.cm.rej"
		f[p+".localcommid"] = hex32(m.LocalCommID)
		f[p+".remotecommid"] = hex32(m.RemoteCommID)
		f[p+".msgrej"] = hex8(uint8(m.MsgRejected))
		f[p+".rejinfolen"] = hex8(uint8(len(m.ARI)))
		f[p+".reason"] = hex16(uint16(m.Reason))
		// tshark shows all 72 ARI bytes, whatever the length says.
		f[p+".ari"] = colons(mad[HeaderSize+rejARI.off : HeaderSize+rejARI.off+REJARISize])
		f[p+".private"] = colons(m.PrivateData)
	case *DREQ:
		f["infiniband.cm.dreq.localcommid"] = hex32(m.LocalCommID)
		f["infiniband.cm.dreq.remotecommid"] = hex32(m.RemoteCommID)
		f["infiniband.cm.req.remoteqpneecn"] = hex24(m.RemoteQPN) // sic
		f["infiniband.cm.dreq.private"] = colons(m.PrivateData)
	case *DREP:
		f["infiniband.cm.drsp.localcommid"] = hex32(m.LocalCommID)
		f["infiniband.cm.drsp.remotecommid"] = hex32(m.RemoteCommID)
		f["infiniband.cm.drsp.private"] = colons(m.PrivateData)
	default:
		// Wireshark 4.0 decodes no other CM message: only the header.
	}
	return f
}

func reqFieldsOf(m *REQ, f map[string]string) {
	p := "infiniband.cm.req"
	f[p] = hex32(m.LocalCommID)
	f[p+".serviceid"] = hex64(uint64(m.ServiceID))
	ps, port, _ := m.ServiceID.RDMA()
	if m.ServiceID>>24 == 1 { // the IB_CMA_SERVICE_ID prefix 00:00:00:00:01
		f[p+".serviceid.protocol"] = hex8(uint8(ps))
		f[p+".serviceid.dport"] = hex16(port)
	}
	f[p+".localcaguid"] = hex64(m.LocalCAGUID)
	f[p+".localqkey"] = hex32(m.LocalQKey)
	f[p+".localqpn"] = hex24(m.LocalQPN)
	f[p+".responderres"] = hex8(m.ResponderResources)
	f[p+".localeecn"] = hex24(m.LocalEECN)
	f[p+".initdepth"] = hex8(m.InitiatorDepth)
	f[p+".remoteeecn"] = hex24(m.RemoteEECN)
	f[p+".remoteresptout"] = hex8(m.RemoteCMResponseTimeout)
	f[p+".transpsvctype"] = hex8(uint8(m.TransportServiceType))
	f[p+".e2eflowctrl"] = flag8(m.EndToEndFlowControl)
	f[p+".startpsn"] = hex24(m.StartingPSN)
	f[p+".localresptout"] = hex8(m.LocalCMResponseTimeout)
	f[p+".retrcount"] = hex8(m.RetryCount)
	f[p+".pkey"] = hex16(m.PKey)
	f[p+".pppmtu"] = hex8(m.PathMTU)
	f[p+".rdcexist"] = flag8(m.RDCExists)
	f[p+".rnrretrcount"] = hex8(m.RNRRetryCount)
	f[p+".maxcmretr"] = hex8(m.MaxCMRetries)
	f[p+".srq"] = flag8(m.SRQ)
	f[p+".ext_transport"] = hex8(m.ExtendedTransportType)
	pathFieldsOf(p+".prim_", &m.Primary, true, f)
	pathFieldsOf(p+".alt_", &m.Alternate, false, f)
	// The dissector treats the private data as an rdma_cm header when the
	// service ID is an rdma_cm one; the "private" field is the rest.
	if h, err := ParseCMAHeader(m.PrivateData); err == nil && ps == PortSpaceTCP {
		c := p + ".ip_cm"
		f[c+".majv"] = hex8(h.Version >> 4)
		f[c+".minv"] = hex8(h.Version & 0xF)
		f[c+".ipv"] = hex8(uint8(h.IPVersion()))
		f[c+".sport"] = hex16(h.SrcPort)
		if h.IPVersion() == 4 {
			f[c+".sip4"], f[c+".dip4"] = h.Src.String(), h.Dst.String()
		} else {
			f[c+".sip6"], f[c+".dip6"] = h.Src.String(), h.Dst.String()
		}
		f[c+".private"] = colons(m.PrivateData[CMAHeaderSize:])
	} else {
		f[p+".private"] = colons(m.PrivateData)
	}
}

// pathFieldsOf names a REQ path's fields as tshark does: on RoCEv2 it
// shows the primary GIDs as IPv4 addresses made of their last 4 bytes,
// even IPv6 ones (fd00::1:2 shows as 0.1.0.2), and the alternate GIDs as
// bytes.
func pathFieldsOf(p string, path *Path, primary bool, f map[string]string) {
	f[p+"locallid"] = fmt.Sprint(path.LocalLID)
	f[p+"remotelid"] = fmt.Sprint(path.RemoteLID)
	gid := func(name string, g GID) {
		if primary {
			f[p+name+"_ipv4"] = netip.AddrFrom4([4]byte(g[12:])).String()
		} else {
			f[p+name] = colons(g[:])
		}
	}
	gid("localgid", path.LocalGID)
	gid("remotegid", path.RemoteGID)
	f[p+"tfcclass"] = hex8(path.TrafficClass)
	f[p+"hoplim"] = hex8(path.HopLimit)
	f[p+"sl"] = hex8(path.SL)
	f[p+"subnetlocal"] = flag8(path.SubnetLocal)
	f[p+"localacktout"] = hex8(path.LocalACKTimeout)
}
