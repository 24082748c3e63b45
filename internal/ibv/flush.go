package ibv

// FlushType is the placement type of a FLUSH (enum ibv_placement_type): a
// set of bits, with the values the FETH carries in its placement type
// field (bits 3:0).
type FlushType uint8

// FLUSH placement types, with the libibverbs values.
const (
	FlushGlobal     FlushType = 1 << 0 // IBV_FLUSH_GLOBAL: global visibility
	FlushPersistent FlushType = 1 << 1 // IBV_FLUSH_PERSISTENT: persistence
)

// FlushLevel is the selectivity level of a FLUSH (enum
// ibv_selectivity_level), with the values of the FETH's selectivity level
// field (bits 5:4).
type FlushLevel uint8

// FLUSH selectivity levels, with the libibverbs values.
const (
	FlushRange FlushLevel = 0 // IBV_FLUSH_RANGE: [RemoteAddr, RemoteAddr+Length)
	FlushMR    FlushLevel = 1 // IBV_FLUSH_MR: the whole region (or window) of RKey
)
