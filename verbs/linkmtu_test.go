package verbs

import "testing"

// TestMTUFromLink pins the link MTU → active MTU table: rxe's 80-byte
// allowance on IPv4, the 84 bytes of a WRITE Only with Immediate on IPv6.
func TestMTUFromLink(t *testing.T) {
	tests := []struct {
		link       int
		ipv6       bool
		want       MTU
		wantReason string
	}{
		{1500, false, MTU1024, "Ethernet"},
		{1500, true, MTU1024, "Ethernet"},
		{9000, false, MTU4096, "jumbo"},
		{4200, false, MTU4096, "4200"},
		{4176, false, MTU4096, "exactly 4096 + 80"},
		{4175, false, MTU2048, "one byte short of rxe's allowance"},
		{4176, true, MTU2048, "IPv6 needs 84"},
		{4180, true, MTU4096, "exactly 4096 + 84"},
		{1100, false, MTU512, "1020 bytes left"},
		{1104, false, MTU1024, "1024 + 80"},
		{2128, false, MTU2048, "2048 + 80"},
		{576, false, MTU256, "496 left"},
		{100, false, MTU256, "nothing fits: rxe's floor"},
		{0, true, MTU256, "unknown"},
		{65536, false, MTU4096, "loopback"},
	}
	for _, tt := range tests {
		if got := mtuFromLink(tt.link, tt.ipv6); got != tt.want {
			t.Errorf("link %d ipv6=%v (%s): %v, want %v", tt.link, tt.ipv6, tt.wantReason, got, tt.want)
		}
	}
}
