package simnet

import "testing"

func TestSizeClass(t *testing.T) {
	tests := []struct{ n, class, capacity int }{
		{0, 0, 64},
		{1, 0, 64},
		{64, 0, 64},
		{65, 1, 128},
		{1024, 4, 1024},
		{1025, 5, 2048},
		{4096 + 64, 7, 8192},
		{65535, 10, 65536},
	}
	var p bufPool
	for _, tt := range tests {
		if got := sizeClass(tt.n); got != tt.class {
			t.Errorf("sizeClass(%d) = %d, want %d", tt.n, got, tt.class)
		}
		b := p.get(tt.n)
		if len(b) != tt.n || cap(b) != tt.capacity {
			t.Errorf("get(%d): len %d cap %d, want len %d cap %d", tt.n, len(b), cap(b), tt.n, tt.capacity)
		}
		p.put(b)
		// The buffer just returned is the one handed out next for its class.
		if again := p.get(tt.n); &again[:1][0] != &b[:1][0] {
			t.Errorf("get(%d) after put did not reuse the buffer", tt.n)
		}
	}
}
