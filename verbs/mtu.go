package verbs

import "github.com/goroce/goroce/internal/ibv"

// MTU is an InfiniBand path MTU (enum ibv_mtu): the payload bytes carried by
// one packet, headers excluded. Valid reports whether it is one of the five
// IB MTUs, Bytes returns the payload size (256 << (m-1); 0 for an invalid
// MTU), and String the size as ibv_devinfo prints it, e.g. "1024", or
// "MTU(n)" for an invalid value.
type MTU = ibv.MTU

// The IB MTU values of libibverbs.
const (
	MTU256  MTU = ibv.MTU256  // IBV_MTU_256
	MTU512  MTU = ibv.MTU512  // IBV_MTU_512
	MTU1024 MTU = ibv.MTU1024 // IBV_MTU_1024
	MTU2048 MTU = ibv.MTU2048 // IBV_MTU_2048
	MTU4096 MTU = ibv.MTU4096 // IBV_MTU_4096
)

// MTUFromBytes returns the largest IB MTU whose payload fits in n bytes, or 0
// (not Valid) when n is below 256. An exact size such as 1024 maps to its own
// MTU; a link MTU must first have the RoCEv2 header overhead subtracted (rxe
// subtracts 80 bytes, so a 1500-byte Ethernet link gives MTU1024).
func MTUFromBytes(n int) MTU {
	for m := MTU4096; m >= MTU256; m-- {
		if n >= m.Bytes() {
			return m
		}
	}
	return 0
}
