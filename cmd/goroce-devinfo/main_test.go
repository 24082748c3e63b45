package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// Tests bind testkit's addresses of this process's own: other packages'
// tests (and other runs of these) use other loopback addresses at the same
// time, and every device binds UDP 4791.

// host is testkit's address number n, as a string.
func host(n int) string { return testkit.Addr(n).String() }

// runDevinfo runs the program and returns its exit status and output.
func runDevinfo(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// deviceAttrs opens a device as the program does and returns what it
// reports, the reference the output is checked against.
func deviceAttrs(t *testing.T, cfg verbs.DeviceConfig) (verbs.DeviceAttr, verbs.PortAttr, []verbs.GIDEntry, int) {
	t.Helper()
	dev, err := verbs.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pa, err := dev.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	return dev.Query(), pa, dev.GIDTable(), dev.NumCompVectors()
}

// fields parses "<tabs>name:<tabs>value" lines into name -> value; names
// that occur twice keep the first value.
func fields(out string) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(out, "\n") {
		name, value, ok := strings.Cut(strings.TrimLeft(line, "\t"), ":")
		if !ok {
			continue
		}
		if _, dup := m[name]; !dup {
			m[name] = strings.TrimLeft(value, "\t")
		}
	}
	return m
}

func TestVerboseValues(t *testing.T) {
	addr := host(20)
	code, out, errOut := runDevinfo(t, "--bind", addr, "-v")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	a, p, gids, vectors := deviceAttrs(t, verbs.DeviceConfig{Addr: netip.MustParseAddr(addr)})
	got := fields(out)
	hex := func(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }
	for _, tc := range []struct{ name, want string }{
		{"hca_id", verbs.DefaultDeviceName},
		{"transport", "InfiniBand (0)"},
		{"fw_ver", a.FWVer},
		{"node_guid", a.NodeGUID.String()},
		{"sys_image_guid", a.SysImageGUID.String()},
		{"vendor_id", fmt.Sprintf("0x%04x", a.VendorID)},
		{"vendor_part_id", strconv.Itoa(int(a.VendorPartID))},
		{"hw_ver", fmt.Sprintf("0x%X", a.HWVer)},
		{"phys_port_cnt", "1"},
		{"max_mr_size", hex(a.MaxMRSize)},
		{"page_size_cap", hex(a.PageSizeCap)},
		{"max_qp", strconv.Itoa(a.MaxQP)},
		{"max_qp_wr", strconv.Itoa(a.MaxQPWR)},
		{"device_cap_flags", fmt.Sprintf("0x%08x", uint32(a.DeviceCapFlags))},
		{"max_sge", strconv.Itoa(a.MaxSGE)},
		{"max_sge_rd", strconv.Itoa(a.MaxSGERD)},
		{"max_cq", strconv.Itoa(a.MaxCQ)},
		{"max_cqe", strconv.Itoa(a.MaxCQE)},
		{"max_mr", strconv.Itoa(a.MaxMR)},
		{"max_pd", strconv.Itoa(a.MaxPD)},
		{"max_qp_rd_atom", strconv.Itoa(a.MaxQPRdAtom)},
		{"max_res_rd_atom", strconv.Itoa(a.MaxResRdAtom)},
		{"max_qp_init_rd_atom", strconv.Itoa(a.MaxQPInitRdAtom)},
		{"atomic_cap", "ATOMIC_HCA (1)"},
		{"max_mw", strconv.Itoa(a.MaxMW)},
		{"max_ah", strconv.Itoa(a.MaxAH)},
		{"max_srq", strconv.Itoa(a.MaxSRQ)},
		{"max_srq_wr", strconv.Itoa(a.MaxSRQWR)},
		{"max_srq_sge", strconv.Itoa(a.MaxSRQSGE)},
		{"max_pkeys", strconv.Itoa(a.MaxPKeys)},
		{"local_ca_ack_delay", strconv.Itoa(int(a.LocalCAAckDelay))},
		{"device_cap_flags_ex", fmt.Sprintf("0x%X", uint64(a.DeviceCapFlags))},
		{"num_comp_vectors", strconv.Itoa(vectors)},
		{"port", "1"},
		{"state", "PORT_ACTIVE (4)"},
		{"max_mtu", "4096 (5)"},
		{"active_mtu", fmt.Sprintf("%d (%d)", p.ActiveMTU.Bytes(), int(p.ActiveMTU))},
		{"sm_lid", "0"},
		{"port_lid", "0"},
		{"port_lmc", "0x00"},
		{"link_layer", "Ethernet"},
		{"max_msg_sz", hex(uint64(p.MaxMsgSize))},
		{"port_cap_flags", fmt.Sprintf("0x%08x", uint32(p.PortCapFlags))},
		{"max_vl_num", "1 (1)"},
		{"pkey_tbl_len", strconv.Itoa(p.PKeyTblLen)},
		{"gid_tbl_len", strconv.Itoa(p.GIDTblLen)},
		{"active_width", "1X (1)"},
		{"active_speed", "25.0 Gbps (32)"},
		{"phys_state", "LINK_UP (5)"},
		{"GID[  0]", gids[0].GID.String() + ", RoCE v2"},
		{"GID[  1]", "::ffff:" + addr + ", RoCE v2"},
	} {
		if g, ok := got[tc.name]; !ok || g != tc.want {
			t.Errorf("%s: got %q (present %v), want %q", tc.name, g, ok, tc.want)
		}
	}
	if !strings.HasPrefix(gids[0].GID.String(), "fe80::") {
		t.Errorf("GID 0 %v is not link-local", gids[0].GID)
	}
	if _, ok := got["GID[  2]"]; ok || len(gids) != 2 {
		t.Errorf("GID table of %d entries, output %q", len(gids), out)
	}
}

// capLines returns the flag names listed under the line starting with
// header: the following lines indented by five tabs.
func capLines(out, header string) []string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, header) {
			continue
		}
		var names []string
		for _, f := range lines[i+1:] {
			if !strings.HasPrefix(f, "\t\t\t\t\t") {
				break
			}
			names = append(names, strings.TrimLeft(f, "\t"))
		}
		return names
	}
	return nil
}

func TestDeviceCapFlagNames(t *testing.T) {
	addr := host(21)
	code, out, _ := runDevinfo(t, "--bind", addr, "-v")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	a, _, _, _ := deviceAttrs(t, verbs.DeviceConfig{Addr: netip.MustParseAddr(addr)})
	// The names ibv_devinfo gives the bits a goroce device may set, in
	// ibv_devinfo's order.
	var want []string
	for _, f := range []struct {
		bit  verbs.DeviceCapFlags
		name string
	}{
		{verbs.DeviceResizeMaxWR, "RESIZE_MAX_WR"},
		{verbs.DeviceUDAVPortEnforce, "UD_AV_PORT_ENFORCE"},
		{verbs.DeviceCurrQPStateMod, "CURR_QP_STATE_MOD"},
		{verbs.DeviceSysImageGUID, "SYS_IMAGE_GUID"},
		{verbs.DeviceRCRNRNAKGen, "RC_RNR_NAK_GEN"},
		{verbs.DeviceSRQResize, "SRQ_RESIZE"},
		{verbs.DeviceMemWindow, "MEM_WINDOW"},
		{verbs.DeviceMemMgtExtensions, "MEM_MGT_EXTENSIONS"},
		{verbs.DeviceMemWindowType2B, "MEM_WINDOW_TYPE_2B"},
	} {
		if a.DeviceCapFlags&f.bit != 0 {
			want = append(want, f.name)
		}
	}
	if len(want) == 0 {
		t.Fatal("the device sets none of the expected capability bits")
	}
	if got := capLines(out, "\tdevice_cap_flags:"); !slices.Equal(got, want) {
		t.Errorf("device_cap_flags names %q, want %q", got, want)
	}
	for _, odp := range []string{"\trc_odp_caps:", "\tuc_odp_caps:", "\tud_odp_caps:", "\txrc_odp_caps:"} {
		if got := capLines(out, odp); !slices.Equal(got, []string{"NO SUPPORT"}) {
			t.Errorf("%s %q, want NO SUPPORT", odp, got)
		}
	}
}

func TestPrintFlagsUnknown(t *testing.T) {
	for _, tc := range []struct {
		flags uint64
		names []flagName
		want  string
	}{
		{0, deviceCapNames, ""},
		{uint64(verbs.DeviceSRQResize), deviceCapNames, "\t\t\t\t\tSRQ_RESIZE\n"},
		{1<<15 | 1<<1, deviceCapNames, "\t\t\t\t\tBAD_PKEY_CNTR\n\t\t\t\t\tUnknown flags: 0x8000\n"},
		{1<<34 | 1<<40, deviceCapExNames, "\t\t\t\t\tRAW_SCATTER_FCS\n\t\t\t\t\tUnknown flags: 0x10000000000\n"},
	} {
		var b bytes.Buffer
		printFlags(&b, tc.flags, tc.names)
		if b.String() != tc.want {
			t.Errorf("flags %#x: got %q, want %q", tc.flags, b.String(), tc.want)
		}
	}
}

// skeleton reduces output to its layout: each line's indentation, field
// name and the tab run after the colon, values dropped. Capability flag
// lines (five tabs) are left out: which flags a device has differs.
func skeleton(out string) []string {
	field := regexp.MustCompile(`^(\t*[^\t:]+:\t*)`)
	var s []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "\t\t\t\t\t") {
			continue
		}
		if m := field.FindString(line); m != "" {
			line = m
		}
		s = append(s, line)
	}
	return s
}

// TestLayoutMatchesRxe compares the layout with ibv_devinfo's output for an
// rxe device (testdata, from the rxe VM): same lines, names and tabs.
func TestLayoutMatchesRxe(t *testing.T) {
	for i, tc := range []struct {
		args []string
		file string
	}{
		{[]string{"--bind", host(22), "-v"}, "testdata/rxe-devinfo-v.txt"},
		{[]string{"--bind", host(22)}, "testdata/rxe-devinfo.txt"},
		{[]string{"--bind", host(22), "-i", "1"}, "testdata/rxe-devinfo.txt"},
	} {
		ref, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runDevinfo(t, tc.args...)
		if code != exitOK || errOut != "" {
			t.Fatalf("%d: exit %d, stderr %q", i, code, errOut)
		}
		got, want := skeleton(out), skeleton(string(ref))
		if !slices.Equal(got, want) {
			t.Errorf("%d %v: layout differs from %s", i, tc.args, tc.file)
			for j := range max(len(got), len(want)) {
				var g, w string
				if j < len(got) {
					g = got[j]
				}
				if j < len(want) {
					w = want[j]
				}
				if g != w {
					t.Logf("line %d: got %q, want %q", j+1, g, w)
				}
			}
		}
	}
}

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		stdout    string // prefix
		stderr    string // substring
		notStdout string // substring that must not appear
	}{
		{"name", []string{"--bind", host(24), "-d", "mydev0"}, exitOK, "hca_id:\tmydev0\n", "", ""},
		{"long name", []string{"--bind=" + host(24), "--ib-dev=mydev1"}, exitOK, "hca_id:\tmydev1\n", "", ""},
		{"list", []string{"--bind", host(24), "-l"}, exitOK, "1 HCA found:\n\tgoroce0\n\n", "", "hca_id"},
		{"plain has no limits", []string{"--bind", host(24)}, exitOK, "hca_id:\tgoroce0\n", "", "max_qp"},
		{"port 1", []string{"--bind", host(24), "--port", "1"}, exitOK, "hca_id:", "", ""},
		{"no port 2", []string{"--bind", host(24), "-i", "2"}, exitBadPort, "", "Invalid port requested for device", "hca_id"},
		{"port 0", []string{"-i", "0"}, exitUsage, "", "invalid port 0", ""},
		{"bad address", []string{"--bind", "localhost"}, exitUsage, "", "--bind", ""},
		{"unspecified address", []string{"--bind", "0.0.0.0"}, exitNoDevice, "", "cannot open device", ""},
		{"bad udp port", []string{"--udp-port", "70000"}, exitUsage, "", "--udp-port", ""},
		{"argument", []string{"extra"}, exitUsage, "", "unexpected argument", ""},
		{"unknown flag", []string{"-x"}, exitUsage, "", "-x", ""},
		{"help", []string{"-h"}, exitOK, "Usage: goroce-devinfo", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runDevinfo(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, errOut)
			}
			if !strings.HasPrefix(out, tc.stdout) {
				t.Errorf("stdout %q, want prefix %q", out, tc.stdout)
			}
			if !strings.Contains(errOut, tc.stderr) || (tc.stderr == "" && errOut != "") {
				t.Errorf("stderr %q, want %q", errOut, tc.stderr)
			}
			if tc.notStdout != "" && strings.Contains(out, tc.notStdout) {
				t.Errorf("stdout has %q: %q", tc.notStdout, out)
			}
		})
	}
}

// TestBusyUDPPort: a device already open on the address holds UDP 4791;
// --udp-port shows the device on another port, whose node GUID differs.
func TestBusyUDPPort(t *testing.T) {
	addr := host(25)
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: netip.MustParseAddr(addr)})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	code, _, errOut := runDevinfo(t, "--bind", addr)
	if code != exitNoDevice || !strings.Contains(errOut, "cannot open device") {
		t.Errorf("busy port: exit %d, stderr %q", code, errOut)
	}
	code, out, errOut := runDevinfo(t, "--bind", addr, "--udp-port", "4792")
	if code != exitOK || errOut != "" {
		t.Fatalf("--udp-port: exit %d, stderr %q", code, errOut)
	}
	a, _, _, _ := deviceAttrs(t, verbs.DeviceConfig{Addr: netip.MustParseAddr(addr), Port: 4792})
	if got := fields(out)["node_guid"]; got != a.NodeGUID.String() || got == dev.Query().NodeGUID.String() {
		t.Errorf("node_guid %s: want %v, unlike port 4791's %v", got, a.NodeGUID, dev.Query().NodeGUID)
	}
}
