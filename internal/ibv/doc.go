// Package ibv holds the values of libibverbs' enums that both sides of
// goroce use: the public API (package verbs) and the transport state
// machines (internal/transport). Each enum is declared once, here, with the
// values of libibverbs' verbs.h, so that a value crosses from one side to
// the other without a conversion: ibv_wr_opcode (WROpcode), ibv_send_flags
// (SendFlags), ibv_wc_status (WCStatus), ibv_wc_opcode (WCOpcode),
// ibv_wc_flags (WCFlags), ibv_access_flags (AccessFlags), ibv_mtu (MTU),
// ibv_qp_type (QPType), ibv_qp_state (QPState), ibv_placement_type
// (FlushType) and ibv_selectivity_level (FlushLevel). Where the wire
// carries such a value (the FLUSH extended transport header), the values
// are the wire's too; internal/wire keeps only the bit fields.
//
// Package verbs exposes them as type aliases with the same names
// (verbs.WCStatus is ibv.WCStatus), so the String methods here are the
// public ones. The package is a leaf: it imports only the standard library.
package ibv
