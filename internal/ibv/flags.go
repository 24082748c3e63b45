package ibv

import (
	"math/bits"
	"strconv"
	"strings"
)

// SendFlags modify a send work request (enum ibv_send_flags).
type SendFlags uint32

// Send flags, with the libibverbs values.
const (
	// SendFence waits for earlier RDMA READs and atomics to complete.
	SendFence SendFlags = 1 << 0
	// SendSignaled asks for a completion; without it (and without
	// sq_sig_all) a successful work request completes silently.
	SendSignaled SendFlags = 1 << 1
	// SendSolicited sets the Solicited Event bit, which wakes a receiver
	// armed for solicited completions.
	SendSolicited SendFlags = 1 << 2
	// SendInline copies the data into the work request at post time, so
	// the buffer may be reused as soon as the post returns.
	SendInline SendFlags = 1 << 3
	// SendIPCsum asks for checksum offload (RAW_PACKET/UD; not supported).
	SendIPCsum SendFlags = 1 << 4
)

// WCFlags qualify a completion (enum ibv_wc_flags).
type WCFlags uint32

// Completion flags, with the libibverbs values.
const (
	WCGRH      WCFlags = 1 << 0 // IBV_WC_GRH: a GRH precedes the payload (UD receives)
	WCWithImm  WCFlags = 1 << 1 // IBV_WC_WITH_IMM: the immediate data is valid
	WCIPCsumOK WCFlags = 1 << 2 // IBV_WC_IP_CSUM_OK: IP checksum verified
	WCWithInv  WCFlags = 1 << 3 // IBV_WC_WITH_INV: the invalidated rkey is valid
)

// AccessFlags are the access rights of a memory region or window, and the
// incoming operations a QP's responder accepts (enum ibv_access_flags). It
// is also what a memory access needs, as the transport asks for it.
type AccessFlags uint32

// Access flags, with the values of libibverbs/verbs.h.
const (
	AccessLocalWrite      AccessFlags = 1 << 0 // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite     AccessFlags = 1 << 1 // IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead      AccessFlags = 1 << 2 // IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic    AccessFlags = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC
	AccessMWBind          AccessFlags = 1 << 4 // IBV_ACCESS_MW_BIND
	AccessZeroBased       AccessFlags = 1 << 5 // IBV_ACCESS_ZERO_BASED
	AccessOnDemand        AccessFlags = 1 << 6 // IBV_ACCESS_ON_DEMAND
	AccessHugeTLB         AccessFlags = 1 << 7 // IBV_ACCESS_HUGETLB
	AccessFlushGlobal     AccessFlags = 1 << 8 // IBV_ACCESS_FLUSH_GLOBAL
	AccessFlushPersistent AccessFlags = 1 << 9 // IBV_ACCESS_FLUSH_PERSISTENT

	// AccessRelaxedOrdering is the first of the optional flags
	// (IBV_ACCESS_RELAXED_ORDERING = IBV_ACCESS_OPTIONAL_FIRST): hints a
	// device may ignore.
	AccessRelaxedOrdering AccessFlags = 1 << 20
)

var accessNames = [...]string{
	"LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC",
	"MW_BIND", "ZERO_BASED", "ON_DEMAND", "HUGETLB",
	"FLUSH_GLOBAL", "FLUSH_PERSISTENT",
}

// String returns the flags as their rdma-core names without the IBV_ACCESS_
// prefix joined by "|", e.g. "LOCAL_WRITE|REMOTE_READ". Bits without a name
// are printed in hex; no flags print as "0".
func (a AccessFlags) String() string {
	if a == 0 {
		return "0"
	}
	var parts []string
	for rest := a; rest != 0; rest &= rest - 1 {
		bit := bits.TrailingZeros32(uint32(rest))
		switch {
		case bit < len(accessNames):
			parts = append(parts, accessNames[bit])
		case AccessFlags(1)<<bit == AccessRelaxedOrdering:
			parts = append(parts, "RELAXED_ORDERING")
		default:
			parts = append(parts, "0x"+strconv.FormatUint(uint64(1)<<bit, 16))
		}
	}
	return strings.Join(parts, "|")
}
