package seal

import (
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/cputime"
	"github.com/goroce/goroce/internal/wire"
)

// The benchmarks seal and open one packet per op, for the payload sizes of
// write_lat (8 bytes) up to a 4096-byte path MTU, as an RDMA WRITE First
// (a RETH: the copy path of Append) and, at full size, a WRITE Middle
// (BTH only: encrypted straight from the payload, most packets of a long
// WRITE). Besides wall time they report cpu-ns/op, the process's CPU time
// per op (getrusage), which stays meaningful on a machine whose other
// load stretches wall time: run them with -cpu 1 so that the process's
// CPU time is the benchmark's.

// benchCase is one packet shape.
type benchCase struct {
	name    string
	hdrs    []byte
	payload int
}

func benchCases() []benchCase {
	var cs []benchCase
	for _, n := range []int{8, 256, 1024, 4096} {
		cs = append(cs, benchCase{fmt.Sprintf("first-%d", n), writeFirst(0), n})
	}
	middle := writeFirst(0)[:wire.BTHLen]
	middle[0] = byte(wire.RCRDMAWriteMiddle)
	return append(cs, benchCase{"middle-4096", middle, 4096})
}

// cpuClock measures the process's CPU time over a benchmark's loop.
type cpuClock time.Duration

func startCPU() cpuClock { return cpuClock(cputime.Process()) }

// report adds cpu-ns/op to b's results.
func (c cpuClock) report(b *testing.B) {
	if c <= 0 || b.N == 0 {
		return // no CPU clock on this system
	}
	b.ReportMetric(float64(cputime.Process()-time.Duration(c))/float64(b.N), "cpu-ns/op")
}

// BenchmarkSeal seals one packet per op (Sealer.Append), ICRC room
// included, into a reused buffer.
func BenchmarkSeal(b *testing.B) {
	for _, bc := range benchCases() {
		b.Run(bc.name, func(b *testing.B) {
			s := NewSealer(&testKey)
			payload := make([]byte, bc.payload)
			buf := make([]byte, 0, bc.payload+256)
			b.SetBytes(int64(bc.payload))
			b.ReportAllocs()
			c := startCPU()
			for b.Loop() {
				buf = s.Append(buf[:0], bc.hdrs, payload, 0)
			}
			c.report(b)
		})
	}
}

// BenchmarkOpen opens one packet per op (Opener.Open) in place. Each op
// first copies a sealed packet into the buffer (Open decrypts in place)
// and rewinds the replay window, so that the one packet opens again: the
// copy is a few percent of the op at 4 KiB.
func BenchmarkOpen(b *testing.B) {
	for _, bc := range benchCases() {
		b.Run(bc.name, func(b *testing.B) {
			sealed := seal1(NewSealer(&testKey), bc.hdrs, make([]byte, bc.payload), 0)
			o := NewOpener(&testKey)
			pkt := make([]byte, len(sealed))
			b.SetBytes(int64(bc.payload))
			b.ReportAllocs()
			c := startCPU()
			for b.Loop() {
				copy(pkt, sealed)
				o.win = Window{}
				if _, err := o.Open(pkt); err != nil {
					b.Fatal(err)
				}
			}
			c.report(b)
		})
	}
}
