package rsocket

import (
	"io"
	"testing"
)

// BenchmarkStream64K: one side writes 64 KiB at a time, the other reads,
// over loopback between two devices of this process.
func BenchmarkStream64K(b *testing.B) {
	client, server := pair(b, 40, 41, Config{SendBuffer: 1 << 20, ReceiveBuffer: 1 << 20})
	buf := make([]byte, 64<<10)
	done := make(chan error, 1)
	go func() {
		_, err := io.CopyBuffer(io.Discard, server, make([]byte, 64<<10))
		done <- err
	}()
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for range b.N {
		if _, err := client.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := client.CloseWrite(); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPingPong: 64-byte round trips.
func BenchmarkPingPong(b *testing.B) {
	client, server := pair(b, 42, 43, Config{})
	go func() { _, _ = io.CopyBuffer(server, server, make([]byte, 64)) }()
	buf := make([]byte, 64)
	b.ResetTimer()
	for range b.N {
		if _, err := client.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(client, buf); err != nil {
			b.Fatal(err)
		}
	}
}
