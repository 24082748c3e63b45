package verbs_test

import (
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// The black-box tests run on devices that internal/rdmatest opens on
// loopback addresses of the test process's own (testkit.Addr(1), Addr(2),
// ...), one test at a time: no test here calls t.Parallel, so a test may
// reuse the addresses of the one before once its devices are closed.

// newEnd is rdmatest.NewEnd on testkit's address number host.
func newEnd(t testing.TB, host int, o rdmatest.EndOptions) *rdmatest.End {
	t.Helper()
	o.Addr = testkit.Addr(host)
	return rdmatest.NewEnd(t, o)
}

// newDevice opens a device on testkit.Addr(1).
func newDevice(t testing.TB) *verbs.Device {
	t.Helper()
	return rdmatest.OpenDevice(t, verbs.DeviceConfig{})
}

// mustMR registers n fresh bytes with access in pd.
func mustMR(t testing.TB, pd *verbs.PD, n int, access verbs.AccessFlags) *verbs.MR {
	t.Helper()
	return rdmatest.MR(t, pd, make([]byte, n), access)
}

// defaultCap is a small, valid set of queue capacities.
var defaultCap = verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}

// mustQP creates a QP of type typ with defaultCap on cq.
func mustQP(t testing.TB, pd *verbs.PD, typ verbs.QPType, cq *verbs.CQ) *verbs.QP {
	t.Helper()
	return rdmatest.QP(t, pd, verbs.QPInitAttr{QPType: typ, SendCQ: cq, RecvCQ: cq, Cap: defaultCap})
}

// The state tests' QPs are moved with exactly the attributes each
// transition requires, with the values of rdma-core's tools, toward a QP
// 0x123 on testkit.Addr(2) that need not exist.
var (
	stateLink = rdmatest.Link{MTU: verbs.MTU1024, Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic,
		QKey: rdmatest.UDQKey, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 12, MaxRdAtomic: 1, MaxDestRdAtomic: 1}
	statePeer = rdmatest.Peer{GID: verbs.GIDFromAddr(testkit.Addr(2)), QPN: 0x123, PSN: 0x42}
)

const stateSQPSN = 0x77

func stateSteps(typ verbs.QPType) [3]rdmatest.Transition {
	return rdmatest.Transitions(typ, stateLink, stateSQPSN, statePeer)
}

// initStep, rtrStep and rtsStep are the RESET->INIT, INIT->RTR and
// RTR->RTS calls of a QP of type typ.
func initStep(typ verbs.QPType) rdmatest.Transition { return stateSteps(typ)[0] }
func rtrStep(typ verbs.QPType) rdmatest.Transition  { return stateSteps(typ)[1] }
func rtsStep(typ verbs.QPType) rdmatest.Transition  { return stateSteps(typ)[2] }

// remoteAV is the address vector of rtrStep.
func remoteAV() verbs.AddressVector { return rtrStep(verbs.QPTypeRC).Attr.AHAttr }

// toState moves a fresh QP to RESET, INIT, RTR or RTS.
func toState(t testing.TB, qp *verbs.QP, target verbs.QPState) {
	t.Helper()
	steps := stateSteps(qp.Type())
	for _, s := range steps[:target] {
		rdmatest.Modify(t, qp, s)
	}
}

// fill writes a pattern derived from seed, so that data from an earlier
// step can never pass for the current one.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*31) ^ byte(i>>8) + seed
	}
}

// sgeList cuts n bytes at offset off of mr into up to parts SGEs of uneven
// lengths, leaving gap bytes between them, and returns the SGEs and the
// offsets (in mr) they cover. n = 0 gives no SGE at all.
func sgeList(mr *verbs.MR, off, n, parts, gap int) ([]verbs.SGE, [][2]int) {
	var (
		sges   []verbs.SGE
		ranges [][2]int
	)
	left := n
	for i := 0; left > 0; i++ {
		k := left
		if i < parts-1 {
			k = max(1, left/(parts-i)+i*3-1)
			k = min(k, left)
		}
		sges = append(sges, mr.SGE(off, k))
		ranges = append(ranges, [2]int{off, off + k})
		off += k + gap
		left -= k
	}
	return sges, ranges
}

// gather concatenates the bytes of buf that ranges cover.
func gather(buf []byte, ranges [][2]int) []byte {
	var out []byte
	for _, r := range ranges {
		out = append(out, buf[r[0]:r[1]]...)
	}
	return out
}
