package netio

import (
	"testing"

	"github.com/goroce/goroce/internal/wire"
)

// The expected ports are those rxe used in the captures of
// shared/rxe-vm/captures (tshark -e udp.srcport -e infiniband.bth.destqp),
// with the QPNs from the matching .log files.

func TestSourcePortForFlowMatchesRxe(t *testing.T) {
	tests := []struct {
		capture       string
		local, remote wire.QPN
		port          uint16
	}{
		{"rc_pingpong", 0x11, 0x25, 49781},
		{"uc_pingpong", 0x12, 0x26, 49836},
		{"write_bw", 0x14, 0x28, 49952},
		{"read_bw", 0x15, 0x29, 50013},
		{"send_bw", 0x16, 0x2a, 50076},
		{"atomic_fadd", 0x17, 0x2b, 50141},
		{"atomic_cswap", 0x18, 0x2c, 50208},
		{"write_lat", 0x19, 0x2d, 50277},
		{"send_lat", 0x1a, 0x2e, 50348},
	}
	for _, tt := range tests {
		// Both ends of the connection send from the same port.
		if got := SourcePortForFlow(tt.local, tt.remote); got != tt.port {
			t.Errorf("%s: SourcePortForFlow(%v, %v) = %d, rxe used %d", tt.capture, tt.local, tt.remote, got, tt.port)
		}
		if got := SourcePortForFlow(tt.remote, tt.local); got != tt.port {
			t.Errorf("%s: SourcePortForFlow(%v, %v) = %d, rxe used %d", tt.capture, tt.remote, tt.local, got, tt.port)
		}
	}
}

func TestSourcePortForQPNMatchesRxe(t *testing.T) {
	tests := []struct {
		capture string
		qpn     wire.QPN
		port    uint16
	}{
		{"ud_pingpong (vm0's UD QP)", 0x27, 63843},
		{"ud_pingpong (vm1's UD QP)", 0x13, 53368},
		{"write_bw_rdmacm (QP1, CM MADs)", wire.GSIQPN, 55410},
	}
	for _, tt := range tests {
		if got := SourcePortForQPN(tt.qpn); got != tt.port {
			t.Errorf("%s: SourcePortForQPN(%v) = %d, rxe used %d", tt.capture, tt.qpn, got, tt.port)
		}
	}
}

func TestSourcePortRange(t *testing.T) {
	// The extremes of every input stay in the dynamic range.
	for _, q := range []wire.QPN{0, 1, 0x3FFF, 0x4000, 0xFFFFFF, 0xFFFFFFFF} {
		for _, p := range []uint16{SourcePortForQPN(q), SourcePortForFlow(q, 0xFFFFFF), SourcePortForFlowLabel(uint32(q))} {
			if p < MinSourcePort {
				t.Errorf("QPN %#x: port %#x below the dynamic range", uint32(q), p)
			}
		}
	}
	// The label folds to every port of the range.
	seen := make(map[uint16]bool)
	for fl := range uint32(1 << 14) {
		seen[SourcePortForFlowLabel(fl)] = true
	}
	if len(seen) != MaxSourcePort-MinSourcePort+1 {
		t.Errorf("flow labels reach %d ports, want all %d", len(seen), MaxSourcePort-MinSourcePort+1)
	}
	if FlowLabel(0x14, 0x28)&^flowLabelMask != 0 {
		t.Error("flow label wider than 20 bits")
	}
}
