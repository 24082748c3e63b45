package ibv

import "strconv"

// WROpcode is a send work request's operation (enum ibv_wr_opcode).
type WROpcode int

// Send opcodes, with the libibverbs values.
const (
	WRRDMAWrite         WROpcode = 0  // IBV_WR_RDMA_WRITE (RC, UC)
	WRRDMAWriteWithImm  WROpcode = 1  // IBV_WR_RDMA_WRITE_WITH_IMM (RC, UC)
	WRSend              WROpcode = 2  // IBV_WR_SEND (RC, UC, UD)
	WRSendWithImm       WROpcode = 3  // IBV_WR_SEND_WITH_IMM (RC, UC, UD)
	WRRDMARead          WROpcode = 4  // IBV_WR_RDMA_READ (RC)
	WRAtomicCmpAndSwp   WROpcode = 5  // IBV_WR_ATOMIC_CMP_AND_SWP (RC)
	WRAtomicFetchAndAdd WROpcode = 6  // IBV_WR_ATOMIC_FETCH_AND_ADD (RC)
	WRLocalInv          WROpcode = 7  // IBV_WR_LOCAL_INV (RC)
	WRBindMW            WROpcode = 8  // IBV_WR_BIND_MW (RC, UC)
	WRSendWithInv       WROpcode = 9  // IBV_WR_SEND_WITH_INV (RC, UC)
	WRTSO               WROpcode = 10 // IBV_WR_TSO (RAW_PACKET only; not supported)
	WRDriver1           WROpcode = 11 // IBV_WR_DRIVER1 (not supported)
	WRFlush             WROpcode = 14 // IBV_WR_FLUSH (RC)
	WRAtomicWrite       WROpcode = 15 // IBV_WR_ATOMIC_WRITE (RC)
)

var wrOpcodeNames = [...]string{
	WRRDMAWrite:         "rdma-write",
	WRRDMAWriteWithImm:  "rdma-write-with-imm",
	WRSend:              "send",
	WRSendWithImm:       "send-with-imm",
	WRRDMARead:          "rdma-read",
	WRAtomicCmpAndSwp:   "atomic-cmp-and-swp",
	WRAtomicFetchAndAdd: "atomic-fetch-and-add",
	WRLocalInv:          "local-inv",
	WRBindMW:            "bind-mw",
	WRSendWithInv:       "send-with-inv",
	WRTSO:               "tso",
	WRDriver1:           "driver1",
	WRFlush:             "flush",
	WRAtomicWrite:       "atomic-write",
}

// String returns the text of ibv_wr_opcode_str, e.g. "rdma-write".
func (o WROpcode) String() string {
	if o >= 0 && int(o) < len(wrOpcodeNames) && wrOpcodeNames[o] != "" {
		return wrOpcodeNames[o]
	}
	return "WROpcode(" + strconv.Itoa(int(o)) + ")"
}

// WCOpcode is the operation a completion reports (enum ibv_wc_opcode).
// Receive opcodes have the WCRecv bit set, so op&WCRecv != 0 tests for a
// receive completion.
type WCOpcode int

// Completion opcodes, with the libibverbs values.
const (
	WCSend            WCOpcode = 0   // IBV_WC_SEND
	WCRDMAWrite       WCOpcode = 1   // IBV_WC_RDMA_WRITE
	WCRDMARead        WCOpcode = 2   // IBV_WC_RDMA_READ
	WCCompSwap        WCOpcode = 3   // IBV_WC_COMP_SWAP
	WCFetchAdd        WCOpcode = 4   // IBV_WC_FETCH_ADD
	WCBindMW          WCOpcode = 5   // IBV_WC_BIND_MW
	WCLocalInv        WCOpcode = 6   // IBV_WC_LOCAL_INV
	WCTSO             WCOpcode = 7   // IBV_WC_TSO
	WCFlush           WCOpcode = 8   // IBV_WC_FLUSH
	WCAtomicWrite     WCOpcode = 9   // IBV_WC_ATOMIC_WRITE
	WCRecv            WCOpcode = 128 // IBV_WC_RECV
	WCRecvRDMAWithImm WCOpcode = 129 // IBV_WC_RECV_RDMA_WITH_IMM
)

var wcOpcodeNames = [...]string{
	WCSend:        "SEND",
	WCRDMAWrite:   "RDMA_WRITE",
	WCRDMARead:    "RDMA_READ",
	WCCompSwap:    "COMP_SWAP",
	WCFetchAdd:    "FETCH_ADD",
	WCBindMW:      "BIND_MW",
	WCLocalInv:    "LOCAL_INV",
	WCTSO:         "TSO",
	WCFlush:       "FLUSH",
	WCAtomicWrite: "ATOMIC_WRITE",
}

// String returns the enumerator name without the IBV_WC_ prefix.
func (o WCOpcode) String() string {
	switch {
	case o >= 0 && int(o) < len(wcOpcodeNames) && wcOpcodeNames[o] != "":
		return wcOpcodeNames[o]
	case o == WCRecv:
		return "RECV"
	case o == WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return "WCOpcode(" + strconv.Itoa(int(o)) + ")"
}
