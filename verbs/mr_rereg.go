package verbs

// ReregAttr describes a reregistration for MR.ReregWith: Flags select which
// of PD, Buf with IOVA, and Access take effect (enum ibv_rereg_mr_flags),
// the others are ignored, and Access must be 0 unless ReregChangeAccess is
// set, as for Rereg.
type ReregAttr struct {
	Flags ReregFlags
	PD    *PD
	// Buf is the region's new memory and IOVA the address peers use for
	// its first byte (ibv_rereg_mr takes both as the one virtual address;
	// a layer that registers memory of another address space, as
	// goroce-nic does for its clients, gives the two apart). With
	// AccessZeroBased the IOVA is 0 whatever IOVA says.
	Buf    []byte
	IOVA   uint64
	Access AccessFlags
	// KeepKeys keeps LKey and RKey (the key byte is not changed), as a
	// NIC that reregisters in place does: peers holding the rkey reach
	// the new memory with the new rights without being told. Without it
	// the keys change, as Rereg documents.
	KeepKeys bool
}

// ReregWith modifies the registration in place as Rereg does, with a
// caller-chosen IOVA for the new memory and the choice of keeping the
// keys. Like Rereg it waits for accesses in flight under the old
// registration; on error nothing changes.
func (mr *MR) ReregWith(a ReregAttr) error {
	return mr.rereg("ReregMR", a)
}
