package verbs

import (
	"strconv"
	"testing"

	"github.com/goroce/goroce/internal/transport"
)

// TestTransportEnumsMatch guards the casts between the public enums and the
// transport's mirrors of them (the transport cannot import verbs): both
// keep libibverbs' values, so a cast is the conversion.
func TestTransportEnumsMatch(t *testing.T) {
	type pair struct {
		name     string
		pub, int uint64
	}
	pairs := []pair{
		{"SUCCESS", uint64(WCSuccess), uint64(transport.StatusSuccess)},
		{"LOC_LEN_ERR", uint64(WCLocLenErr), uint64(transport.StatusLocLenErr)},
		{"LOC_QP_OP_ERR", uint64(WCLocQPOpErr), uint64(transport.StatusLocQPOpErr)},
		{"LOC_EEC_OP_ERR", uint64(WCLocEECOpErr), uint64(transport.StatusLocEECOpErr)},
		{"LOC_PROT_ERR", uint64(WCLocProtErr), uint64(transport.StatusLocProtErr)},
		{"WR_FLUSH_ERR", uint64(WCWRFlushErr), uint64(transport.StatusWRFlushErr)},
		{"MW_BIND_ERR", uint64(WCMWBindErr), uint64(transport.StatusMWBindErr)},
		{"BAD_RESP_ERR", uint64(WCBadRespErr), uint64(transport.StatusBadRespErr)},
		{"LOC_ACCESS_ERR", uint64(WCLocAccessErr), uint64(transport.StatusLocAccessErr)},
		{"REM_INV_REQ_ERR", uint64(WCRemInvReqErr), uint64(transport.StatusRemInvReqErr)},
		{"REM_ACCESS_ERR", uint64(WCRemAccessErr), uint64(transport.StatusRemAccessErr)},
		{"REM_OP_ERR", uint64(WCRemOpErr), uint64(transport.StatusRemOpErr)},
		{"RETRY_EXC_ERR", uint64(WCRetryExcErr), uint64(transport.StatusRetryExcErr)},
		{"RNR_RETRY_EXC_ERR", uint64(WCRNRRetryExcErr), uint64(transport.StatusRNRRetryExcErr)},
		{"FATAL_ERR", uint64(WCFatalErr), uint64(transport.StatusFatalErr)},
		{"GENERAL_ERR", uint64(WCGeneralErr), uint64(transport.StatusGeneralErr)},
		{"WC_SEND", uint64(WCSend), uint64(transport.WCSend)},
		{"WC_RDMA_WRITE", uint64(WCRDMAWrite), uint64(transport.WCRDMAWrite)},
		{"WC_RDMA_READ", uint64(WCRDMARead), uint64(transport.WCRDMARead)},
		{"WC_COMP_SWAP", uint64(WCCompSwap), uint64(transport.WCCompSwap)},
		{"WC_FETCH_ADD", uint64(WCFetchAdd), uint64(transport.WCFetchAdd)},
		{"WC_BIND_MW", uint64(WCBindMW), uint64(transport.WCBindMW)},
		{"WC_LOCAL_INV", uint64(WCLocalInv), uint64(transport.WCLocalInv)},
		{"WC_RECV", uint64(WCRecv), uint64(transport.WCRecv)},
		{"WC_RECV_RDMA_WITH_IMM", uint64(WCRecvRDMAWithImm), uint64(transport.WCRecvRDMAWithImm)},
		{"WITH_IMM", uint64(WCWithImm), uint64(transport.WCWithImm)},
		{"WITH_INV", uint64(WCWithInv), uint64(transport.WCWithInv)},
		{"WR_RDMA_WRITE", uint64(WRRDMAWrite), uint64(transport.WRRDMAWrite)},
		{"WR_RDMA_WRITE_WITH_IMM", uint64(WRRDMAWriteWithImm), uint64(transport.WRRDMAWriteWithImm)},
		{"WR_SEND", uint64(WRSend), uint64(transport.WRSend)},
		{"WR_SEND_WITH_IMM", uint64(WRSendWithImm), uint64(transport.WRSendWithImm)},
		{"WR_RDMA_READ", uint64(WRRDMARead), uint64(transport.WRRDMARead)},
		{"WR_ATOMIC_CMP_AND_SWP", uint64(WRAtomicCmpAndSwp), uint64(transport.WRAtomicCmpAndSwp)},
		{"WR_ATOMIC_FETCH_AND_ADD", uint64(WRAtomicFetchAndAdd), uint64(transport.WRAtomicFetchAdd)},
		{"WR_SEND_WITH_INV", uint64(WRSendWithInv), uint64(transport.WRSendWithInv)},
		{"SEND_FENCE", uint64(SendFence), uint64(transport.SendFence)},
		{"SEND_SIGNALED", uint64(SendSignaled), uint64(transport.SendSignaled)},
		{"SEND_SOLICITED", uint64(SendSolicited), uint64(transport.SendSolicited)},
		{"SEND_INLINE", uint64(SendInline), uint64(transport.SendInline)},
		{"ACCESS_LOCAL_WRITE", uint64(AccessLocalWrite), uint64(transport.AccessLocalWrite)},
		{"ACCESS_REMOTE_WRITE", uint64(AccessRemoteWrite), uint64(transport.AccessRemoteWrite)},
		{"ACCESS_REMOTE_READ", uint64(AccessRemoteRead), uint64(transport.AccessRemoteRead)},
		{"ACCESS_REMOTE_ATOMIC", uint64(AccessRemoteAtomic), uint64(transport.AccessRemoteAtomic)},
		{"QPS_RESET", uint64(QPStateReset), uint64(transport.StateReset)},
		{"QPS_INIT", uint64(QPStateInit), uint64(transport.StateInit)},
		{"QPS_RTR", uint64(QPStateRTR), uint64(transport.StateRTR)},
		{"QPS_RTS", uint64(QPStateRTS), uint64(transport.StateRTS)},
		{"QPS_SQD", uint64(QPStateSQD), uint64(transport.StateSQD)},
		{"QPS_SQE", uint64(QPStateSQE), uint64(transport.StateSQE)},
		{"QPS_ERR", uint64(QPStateErr), uint64(transport.StateErr)},
	}
	for _, p := range pairs {
		if p.pub != p.int {
			t.Errorf("%s: verbs %d, transport %d", p.name, p.pub, p.int)
		}
	}
	// Every status the transport can name converts to a verbs status with
	// the same libibverbs text.
	for s := transport.Status(0); s <= transport.StatusGeneralErr; s++ {
		if transport.Status(s).String() == "STATUS("+strconv.Itoa(int(s))+")" {
			continue
		}
		if WCStatus(s).String() == "unknown" {
			t.Errorf("transport status %v has no verbs text", s)
		}
	}
}
