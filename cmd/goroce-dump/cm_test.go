package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The CM fixtures are the QP 1 frames of the rxe captures rping.pcap and
// write_bw_rdmacm.pcap (tshark -Y 'infiniband.bth.destqp == 1'): the
// kernel's own REQ, REP, RTU, DREQ and DREP. The values below were read
// from tshark's InfiniBand dissector on the same frames.

func TestCMLines(t *testing.T) {
	_, out, _ := dump(t, filepath.Join("testdata", "rping_cm.pcap"))
	for _, want := range []string{
		"mad=CM_REQ lcid=0x073d5972 svc=TCP:7174 qpn=0x000031 psn=0x0337dc cma=10.99.0.2:54553→10.99.0.3 pdata=0  icrc=ok",
		"mad=CM_REP lcid=0xdf09ee72 rcid=0x073d5972 qpn=0x00001d psn=0x7281ca pdata=0  icrc=ok",
		"mad=CM_RTU lcid=0x073d5972 rcid=0xdf09ee72  icrc=ok",
		"mad=CM_DREQ lcid=0x073d5972 rcid=0xdf09ee72 rqpn=0x00001d  icrc=ok",
		"mad=CM_DREP lcid=0xdf09ee72 rcid=0x073d5972  icrc=ok",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestCMVerbose(t *testing.T) {
	_, out, _ := dump(t, "-v", filepath.Join("testdata", "write_bw_rdmacm_cm.pcap"))
	for _, want := range []string{
		// perftest -R: the control connection, then the data QP's, both
		// to port 18515.
		"        CM    REQ lcid=0x013d5972 svc=TCP:18515 qpn=0x00002f psn=0x61346f type=RC mtu=1024 rr=0 id=0 retry=7 rnr_retry=7 cm_timeout=20/20 max_cm_retries=15 guid=0x505400fffe990002 pkey=0xffff path=10.99.0.2→10.99.0.3 flow=0x149c4 tclass=0 hop=64 ack_timeout=19 cma=10.99.0.2:35951→10.99.0.3 pdata=0\n",
		"        CM    REP lcid=0xdb09ee72 rcid=0x013d5972 qpn=0x00001b psn=0xe53882 rr=0 id=0 rnr_retry=7 ack_delay=15 guid=0x505400fffe990003 pdata=0\n",
		"        CM    REQ lcid=0x063d5972 svc=TCP:18515 qpn=0x000030 psn=0x546793",
		"        CM    DREQ lcid=0x013d5972 rcid=0xdb09ee72 rqpn=0x00001b\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("verbose output lacks %q", want)
		}
	}
}

// crafted.pcap (internal/mad's) holds every CM message with values in
// every field, IPv6 rdma_cm addresses and private data.
func TestCMCrafted(t *testing.T) {
	_, out, _ := dump(t, filepath.Join("..", "..", "internal", "mad", "testdata", "crafted.pcap"))
	for _, want := range []string{
		"mad=CM_REQ lcid=0x01020304 svc=TCP:18515 qpn=0xabcdef psn=0xfedcba cma=[fd00::1:2]:49153→fd00::3:4 pdata=56  icrc=ok",
		"mad=CM_REQ lcid=0xfffffffe svc=0x123456789abcdef0 qpn=0x000001 psn=0x000000 pdata=92  icrc=ok",
		"mad=CM_REJ lcid=0x00000000 rcid=0xcafef00d reason=4(timeout) rejected=REQ pdata=20  icrc=ok",
		"mad=CM_REJ lcid=0x0badf00d rcid=0xdeadbeef reason=28(consumer defined) rejected=other pdata=148  icrc=ok",
		"mad=CM_MRA lcid=0x07070707 rcid=0x08080808 mraed=REP timeout=24  icrc=ok",
		"mad=CM_SIDR_REQ reqid=0x09090909 svc=UDP:7174 cma=malformed(mad: CMA header: cma_version is not 0) pdata=216  icrc=ok",
		"mad=CM_SIDR_REP reqid=0x09090909 status=4(redirect) qpn=0x0a0b0c qkey=0x01234567 pdata=136  icrc=ok",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks %q", want)
		}
	}
}

// A CM MAD that breaks IBA's rules (an MRA of "message MRAed" 3) is
// malformed for --check.
func TestCMMalformed(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "internal", "mad", "testdata", "crafted.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	ids := []byte{7, 7, 7, 7, 8, 8, 8, 8} // the MRA's comm IDs
	i := bytes.Index(b, ids)
	if i < 0 || bytes.Count(b, ids) != 1 {
		t.Fatal("the MRA is not in crafted.pcap once")
	}
	b[i+len(ids)] |= 0xC0
	path := filepath.Join(t.TempDir(), "bad.pcap")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := dump(t, "--check", path)
	if code != exitCheckFail || !strings.Contains(out, "malformed: mad: MRA: message MRAed is 3") || !strings.Contains(out, " 1 malformed,") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}
