package verbs_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// TestRemoteRegionOneSided runs what a one-sided program does: the server
// hands its region to the client as 16 bytes, and the client WRITEs, READs
// and runs both atomics against it with the region's builders and
// PostSendWait, with one CQ for its sends and receives.
func TestRemoteRegionOneSided(t *testing.T) {
	rdmatest.SkipOnHardware(t, "it uses QP.PostSendWait, not on hardware")
	server, client := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	ctx := testkit.Context(t)

	priv, err := server.MR.Remote().MarshalBinary() // what cm private data would carry
	if err != nil {
		t.Fatal(err)
	}
	var remote verbs.RemoteRegion
	if err := remote.UnmarshalBinary(priv); err != nil {
		t.Fatal(err)
	}
	if remote.Addr != server.MR.IOVA() || remote.RKey != server.MR.RKey() || remote.Length != uint64(server.MR.Len()) {
		t.Fatalf("remote %v, want the server's MR %v", remote, server.MR)
	}

	msg := []byte("one-sided, no hand-made encoding")
	copy(client.Buf, msg)
	wr, err := remote.Write(1000, client.MR.SGE(0, len(msg)))
	if err != nil {
		t.Fatal(err)
	}
	wr.WRID = 41
	wc, err := client.QP.PostSendWait(ctx, &wr)
	if err != nil || wc.WRID != 41 || wc.Opcode != verbs.WCRDMAWrite {
		t.Fatalf("WRITE: %+v, %v", wc, err)
	}
	if !bytes.Equal(server.Buf[1000:1000+len(msg)], msg) {
		t.Fatalf("server holds %q", server.Buf[1000:1000+len(msg)])
	}

	// A READ of the same bytes into two SGEs.
	wr, err = remote.Read(1000, client.MR.SGE(4096, 10), client.MR.SGE(8192, len(msg)-10))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.QP.PostSendWait(ctx, &wr); err != nil {
		t.Fatal(err)
	}
	if got := append(client.Buf[4096:4106:4106], client.Buf[8192:8192+len(msg)-10]...); !bytes.Equal(got, msg) {
		t.Fatalf("READ got %q", got)
	}

	// Atomics on the word at 64.
	binary.NativeEndian.PutUint64(server.Buf[64:], 100)
	wr, err = remote.FetchAdd(64, client.MR.SGE(256, 8), 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.QP.PostSendWait(ctx, &wr); err != nil {
		t.Fatal(err)
	}
	if old := binary.NativeEndian.Uint64(client.Buf[256:]); old != 100 {
		t.Fatalf("FETCH_ADD returned %d, want 100", old)
	}
	wr, err = remote.CompareSwap(64, client.MR.SGE(256, 8), 105, 7)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.QP.PostSendWait(ctx, &wr); err != nil {
		t.Fatal(err)
	}
	if old, now := binary.NativeEndian.Uint64(client.Buf[256:]), binary.NativeEndian.Uint64(server.Buf[64:]); old != 105 || now != 7 {
		t.Fatalf("CMP_SWAP: old %d, now %d; want 105, 7", old, now)
	}

	// WRITE with immediate: the server's receive completes after the bytes.
	if err := server.QP.PostRecv(&verbs.RecvWR{WRID: 9}); err != nil {
		t.Fatal(err)
	}
	copy(client.Buf, "imm")
	if wr, err = remote.WriteImm(2000, 0xbeef, client.MR.SGE(0, 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.QP.PostSendWait(ctx, &wr); err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.WorkCompletion, 1)
	if _, err := server.CQ.Wait(ctx, wcs); err != nil {
		t.Fatal(err)
	}
	if wcs[0].Err() != nil || wcs[0].ImmData != 0xbeef || wcs[0].WRID != 9 || string(server.Buf[2000:2003]) != "imm" {
		t.Fatalf("server receive %+v, bytes %q", wcs[0], server.Buf[2000:2003])
	}
	// Nothing of the client's leaked into its CQ.
	if n, _ := client.CQ.Poll(wcs); n != 0 {
		t.Fatalf("client CQ holds %+v", wcs[0])
	}
}

// TestMWRemote describes a bound window for a peer, who reads through it
// and is refused beyond it.
func TestMWRemote(t *testing.T) {
	rdmatest.SkipOnHardware(t, "it uses QP.PostSendWait, not on hardware, and MW.Remote (the device holds a window's binding)")
	server, client := rdmatest.Pair(t,
		rdmatest.EndOptions{MRAccess: verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessMWBind}, rdmatest.EndOptions{})
	ctx := testkit.Context(t)
	mw, err := server.PD.AllocMW(verbs.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mw.Remote(); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("Remote of an unbound window: %v, want ErrInvalidState", err)
	}
	rkey, err := server.QP.BindMW(mw, verbs.MWBind{WRID: 1, SendFlags: verbs.SendSignaled, MR: server.MR,
		Addr: server.MR.IOVA() + 512, Length: 128, Access: verbs.AccessRemoteRead})
	if err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.WorkCompletion, 1)
	if _, err := server.CQ.Wait(ctx, wcs); err != nil || wcs[0].Err() != nil {
		t.Fatalf("bind: %+v, %v", wcs[0], err)
	}
	remote, err := mw.Remote()
	if err != nil || remote != (verbs.RemoteRegion{Addr: server.MR.IOVA() + 512, RKey: rkey, Length: 128}) {
		t.Fatalf("window Remote = %v, %v", remote, err)
	}
	copy(server.Buf[512:], "through the window")
	wr, _ := remote.Read(0, client.MR.SGE(0, 18))
	if _, err := client.QP.PostSendWait(ctx, &wr); err != nil || string(client.Buf[:18]) != "through the window" {
		t.Fatalf("READ through the window: %q, %v", client.Buf[:18], err)
	}
	if _, err := remote.Read(120, client.MR.SGE(0, 16)); err == nil {
		t.Fatal("a READ past the window's end was built")
	}
}

// TestWCErrText checks each unsuccessful status's error: its sentinel,
// its name and the first words of its hint.
func TestWCErrText(t *testing.T) {
	ok := verbs.WorkCompletion{Status: verbs.WCSuccess}
	if ok.Err() != nil {
		t.Fatal("a successful completion has an error")
	}
	if n := testing.AllocsPerRun(100, func() { _ = ok.Err() }); n != 0 {
		t.Errorf("Err of a successful completion allocates %v times", n)
	}
	cases := []struct {
		st       verbs.WCStatus
		sentinel error
		text     string
	}{
		{verbs.WCLocLenErr, verbs.ErrLocalLength, "LOC_LEN_ERR (local length error): the message that arrived is longer"},
		{verbs.WCLocProtErr, verbs.ErrLocalProtection, "LOC_PROT_ERR (local protection error): a local SGE's lkey"},
		{verbs.WCWRFlushErr, verbs.ErrFlushed, "WR_FLUSH_ERR (Work Request Flushed Error): the QP went to ERR before"},
		{verbs.WCMWBindErr, verbs.ErrMWBind, "MW_BIND_ERR"},
		{verbs.WCBadRespErr, verbs.ErrBadResponse, "BAD_RESP_ERR"},
		{verbs.WCRemInvReqErr, verbs.ErrRemoteInvalidRequest, "REM_INV_REQ_ERR (remote invalid request error): the peer's QP refused"},
		{verbs.WCRemAccessErr, verbs.ErrRemoteAccess, "REM_ACCESS_ERR (remote access error): the rkey is wrong"},
		{verbs.WCRemOpErr, verbs.ErrRemoteOperation, "REM_OP_ERR"},
		{verbs.WCRetryExcErr, verbs.ErrRetryExceeded, "RETRY_EXC_ERR (transport retry counter exceeded): no answer"},
		{verbs.WCRNRRetryExcErr, verbs.ErrRNRRetryExceeded, "RNR_RETRY_EXC_ERR (RNR retry counter exceeded): the peer had no receive"},
		{verbs.WCFatalErr, verbs.ErrFatal, "FATAL_ERR"},
		{verbs.WCGeneralErr, verbs.ErrCompletion, "GENERAL_ERR"},
		{verbs.WCStatus(99), verbs.ErrCompletion, "WC_STATUS(99)"},
	}
	for _, c := range cases {
		wc := verbs.WorkCompletion{Status: c.st, Opcode: verbs.WCRDMARead, WRID: 7, QPNum: 0x12a}
		err := wc.Err()
		var we *verbs.WCError
		if !errors.Is(err, c.sentinel) || !errors.As(err, &we) || we.Status != c.st || we.WRID != 7 {
			t.Errorf("%v: %v does not wrap %v as a *WCError", c.st, err, c.sentinel)
			continue
		}
		if s := err.Error(); !strings.HasPrefix(s, "verbs: RDMA_READ work request 7 on QP 0x12a: ") || !strings.Contains(s, c.text) {
			t.Errorf("%v: %q lacks %q", c.st, s, c.text)
		}
	}
	// Every status has a distinct sentinel or the catch-all.
	seen := map[error]verbs.WCStatus{}
	for st := verbs.WCLocLenErr; st <= verbs.WCTMRndvIncomplete; st++ {
		wc := verbs.WorkCompletion{Status: st}
		s := errors.Unwrap(wc.Err())
		if prev, dup := seen[s]; dup && s != verbs.ErrCompletion {
			t.Errorf("%v and %v share %v", prev, st, s)
		}
		seen[s] = st
	}
}
