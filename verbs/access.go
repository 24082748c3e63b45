package verbs

import "github.com/goroce/goroce/internal/ibv"

// AccessFlags are the access rights of a memory region or of a QP's responder
// (enum ibv_access_flags; the values are libibverbs'). Its String method
// returns the flags as their rdma-core names without the IBV_ACCESS_ prefix
// joined by "|", e.g. "LOCAL_WRITE|REMOTE_READ"; bits without a name are
// printed in hex, and no flags as "0".
type AccessFlags = ibv.AccessFlags

// Access flags, with the values of libibverbs/verbs.h.
const (
	AccessLocalWrite      AccessFlags = ibv.AccessLocalWrite      // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite     AccessFlags = ibv.AccessRemoteWrite     // IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead      AccessFlags = ibv.AccessRemoteRead      // IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic    AccessFlags = ibv.AccessRemoteAtomic    // IBV_ACCESS_REMOTE_ATOMIC
	AccessMWBind          AccessFlags = ibv.AccessMWBind          // IBV_ACCESS_MW_BIND
	AccessZeroBased       AccessFlags = ibv.AccessZeroBased       // IBV_ACCESS_ZERO_BASED
	AccessOnDemand        AccessFlags = ibv.AccessOnDemand        // IBV_ACCESS_ON_DEMAND (not supported)
	AccessHugeTLB         AccessFlags = ibv.AccessHugeTLB         // IBV_ACCESS_HUGETLB (a hint; ignored)
	AccessFlushGlobal     AccessFlags = ibv.AccessFlushGlobal     // IBV_ACCESS_FLUSH_GLOBAL
	AccessFlushPersistent AccessFlags = ibv.AccessFlushPersistent // IBV_ACCESS_FLUSH_PERSISTENT

	// AccessRelaxedOrdering is the first of the optional flags
	// (IBV_ACCESS_RELAXED_ORDERING = IBV_ACCESS_OPTIONAL_FIRST). Optional
	// flags are hints a device may ignore, so every bit of the optional
	// range is accepted and has no effect here, as rdma-core's
	// test_relaxed_ordering expects.
	AccessRelaxedOrdering AccessFlags = ibv.AccessRelaxedOrdering
)

const (
	// accessOptionalRange covers IB_UVERBS_ACCESS_OPTIONAL_FIRST (1<<20)
	// through IB_UVERBS_ACCESS_OPTIONAL_LAST (1<<29).
	accessOptionalRange AccessFlags = ((1<<29)<<1 - 1) &^ (1<<20 - 1)

	// accessKnown is every flag with a defined meaning.
	accessKnown = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead |
		AccessRemoteAtomic | AccessMWBind | AccessZeroBased | AccessOnDemand |
		AccessHugeTLB | AccessFlushGlobal | AccessFlushPersistent

	// accessRemote are the rights a remote peer exercises.
	accessRemote = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic

	// accessQP are the flags meaningful as a QP's qp_access_flags: which
	// incoming RDMA operations the responder accepts, FLUSH included
	// (rdma-core's tests set both flush flags on their QPs). LOCAL_WRITE
	// is tolerated because common code (pyverbs, perftest) sets it.
	accessQP = AccessLocalWrite | accessRemote | AccessFlushGlobal | AccessFlushPersistent
)

// validateMRAccess checks the access flags of a memory registration
// (the kernel's ib_check_mr_access): no undefined bits, no on-demand paging,
// and remote write or remote atomic only together with local write, because
// the responder writes into the region on the owner's behalf.
func validateMRAccess(op string, a AccessFlags) error {
	if unknown := a &^ (accessKnown | accessOptionalRange); unknown != 0 {
		return errorf(op, "access", ErrInvalidArgument, "unknown flags %#x", uint32(unknown))
	}
	if a&AccessOnDemand != 0 {
		return newError(op, "access", ErrNotSupported, "on-demand paging")
	}
	if a&AccessRemoteWrite != 0 && a&AccessLocalWrite == 0 {
		return newError(op, "access", ErrInvalidArgument, "remote write requires local write")
	}
	if a&AccessRemoteAtomic != 0 && a&AccessLocalWrite == 0 {
		return newError(op, "access", ErrInvalidArgument, "remote atomic requires local write")
	}
	return nil
}

// validateQPAccess checks a QP's qp_access_flags: only the remote rights (and
// LOCAL_WRITE, harmless) and optional hints.
func validateQPAccess(op string, a AccessFlags) error {
	if bad := a &^ (accessQP | accessOptionalRange); bad != 0 {
		return errorf(op, "qp_access_flags", ErrInvalidArgument, "flags %v not valid for a QP", bad)
	}
	return nil
}
