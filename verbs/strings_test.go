package verbs_test

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// TestStrings prints every object as a log line would and checks each says
// what it is, and nothing of its insides (no pointers, no struct dumps).
func TestStrings(t *testing.T) {
	server, client := rdmatest.Pair(t, rdmatest.EndOptions{}, rdmatest.EndOptions{})
	mw, err := server.PD.AllocMW(verbs.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	srq, err := server.PD.CreateSRQ(verbs.SRQInitAttr{MaxWR: 16})
	if err != nil {
		t.Fatal(err)
	}
	if err := srq.PostRecv(&verbs.RecvWR{WRID: 1}); err != nil {
		t.Fatal(err)
	}
	gid, _ := client.Dev.QueryGID(1, 1)
	ah, err := server.PD.CreateAH(verbs.AddressVector{DGID: gid, SGIDIndex: 1, IsGlobal: true, PortNum: 1, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	pdNum := regexp.MustCompile(`PD \d+`).FindString(server.PD.String())
	rkey := fmt.Sprintf("%#x", server.MR.RKey())
	cases := []struct {
		obj  fmt.Stringer
		want []string
	}{
		{server.Dev, []string{"goroce0 at " + server.Dev.Addr().String() + ":4791"}},
		{server.PD, []string{pdNum + " on goroce0"}},
		{server.MR, []string{"MR rkey " + rkey, fmt.Sprintf("[%#x, +65536)", server.MR.IOVA()), "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC", pdNum}},
		{mw, []string{"MW type2 rkey", "unbound", pdNum}},
		{server.CQ, []string{"CQ ", "on goroce0: 0 of 512 completions queued"}},
		{srq, []string{"SRQ ", pdNum, "1 of 16 receives posted"}},
		{ah, []string{"AH to " + client.Dev.Addr().String() + ":4791 (GID index 1)", pdNum}},
		{server.QP, []string{fmt.Sprintf("QP %#x RC RTS", server.QP.QPN()), pdNum,
			fmt.Sprintf("peer QP %#x at %v:4791", client.QP.QPN(), client.Dev.Addr()), "access REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC"}},
	}
	for _, c := range cases {
		s := c.obj.String()
		for _, w := range c.want {
			if !strings.Contains(s, w) {
				t.Errorf("%T prints as %q, which lacks %q", c.obj, s, w)
			}
		}
		if strings.ContainsAny(s, "{}&\n") {
			t.Errorf("%T prints its insides: %q", c.obj, s)
		}
		t.Log(s)
	}
	// %v of a pointer uses String too.
	if s := fmt.Sprintf("%v", server.QP); !strings.HasPrefix(s, "QP 0x") {
		t.Errorf("%%v of a QP = %q", s)
	}

	// The end of each life is visible.
	if err := mw.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := client.QP.Destroy(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		obj  fmt.Stringer
		want string
	}{{mw, "(deallocated)"}, {client.QP, fmt.Sprintf("QP %#x RC destroyed", client.QP.QPN())}} {
		if s := c.obj.String(); !strings.Contains(s, c.want) {
			t.Errorf("%T prints as %q, which lacks %q", c.obj, s, c.want)
		}
	}
	if err := server.Dev.Close(); err != nil {
		t.Fatal(err)
	}
	if s := server.Dev.String(); !strings.HasSuffix(s, "(closed)") {
		t.Errorf("closed device prints as %q", s)
	}
	if s := server.MR.String(); !strings.HasSuffix(s, "(deregistered)") {
		t.Errorf("deregistered MR prints as %q", s)
	}
}

// TestOpenAddressInUse opens a second device on an address and port in use:
// ErrBusy, with the address, the port and how to choose another.
func TestOpenAddressInUse(t *testing.T) {
	addr := testkit.Addr(1)
	first, err := verbs.Open(verbs.DeviceConfig{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_, err = verbs.Open(verbs.DeviceConfig{Addr: addr})
	var e *verbs.Error
	if !errors.Is(err, verbs.ErrBusy) || !errors.As(err, &e) || e.Field != "Port" {
		t.Fatalf("second Open: %v, want a *verbs.Error on Port wrapping ErrBusy", err)
	}
	for _, w := range []string{addr.String() + ":4791 is in use", "DeviceConfig.Addr", "DeviceConfig.Port"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q lacks %q", err, w)
		}
	}
	// Another port, as the message says, works between goroce devices.
	second, err := verbs.Open(verbs.DeviceConfig{Addr: addr, Port: 4792}) // on this process's own address
	if err != nil {
		t.Fatalf("Open on another port: %v", err)
	}
	second.Close()

	// An address of no interface of this machine (TEST-NET-1; binding
	// sends nothing).
	_, err = verbs.Open(verbs.DeviceConfig{Addr: netip.MustParseAddr("192.0.2.1")})
	if !errors.Is(err, verbs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not an address of this machine") {
		t.Errorf("Open on 192.0.2.1: %v", err)
	}
}

// TestAsyncEventString prints the events a program meets.
func TestAsyncEventString(t *testing.T) {
	for _, c := range []struct {
		ev   verbs.AsyncEvent
		want string
	}{
		{verbs.AsyncEvent{Type: verbs.EventQPAccessErr, Refusal: verbs.Refusal{Reason: verbs.RefusedKey, Op: verbs.WRRDMARead,
			RKey: 0x1234, RemoteAddr: 0x1000, Length: 8, PSN: 5}},
			"QP_ACCESS_ERR: rdma-read of 8 bytes at 0x1000 rkey 0x1234 (PSN 0x000005): refused by the rkey check: rkey 0x1234 names no memory region"},
		{verbs.AsyncEvent{Type: verbs.EventCQErr}, "CQ_ERR: the CQ overran"},
	} {
		if s := c.ev.String(); !strings.HasPrefix(s, c.want) {
			t.Errorf("String = %q, want prefix %q", s, c.want)
		}
	}
}
