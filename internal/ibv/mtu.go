package ibv

import "strconv"

// MTU is an InfiniBand path MTU (enum ibv_mtu): the payload bytes carried by
// one packet, headers excluded.
type MTU int

// The IB MTU values of libibverbs.
const (
	MTU256  MTU = 1 // IBV_MTU_256
	MTU512  MTU = 2 // IBV_MTU_512
	MTU1024 MTU = 3 // IBV_MTU_1024
	MTU2048 MTU = 4 // IBV_MTU_2048
	MTU4096 MTU = 5 // IBV_MTU_4096
)

// Valid reports whether m is one of the five IB MTUs.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// Bytes returns the payload size in bytes (256 << (m-1)), or 0 for an
// invalid MTU.
func (m MTU) Bytes() int {
	if !m.Valid() {
		return 0
	}
	return 128 << m
}

// String returns the size in bytes, e.g. "1024", as ibv_devinfo prints it, or
// "MTU(n)" for an invalid value.
func (m MTU) String() string {
	if !m.Valid() {
		return "MTU(" + strconv.Itoa(int(m)) + ")"
	}
	return strconv.Itoa(m.Bytes())
}
