// Package mad is the wire format of InfiniBand communication management:
// the 256-byte management datagram (MAD) with its 24-byte common header,
// the eleven CM messages of IBA vol. 1 chapter 12 (REQ, MRA, REJ, REP, RTU,
// DREQ, DREP, SIDR_REQ, SIDR_REP, LAP, APR), and rdma_cm's addressing on
// top of them: port spaces, service IDs, the header at the start of a
// REQ's private data, and the flow label and UDP source port rdma_cm and
// rxe derive for a connection. It holds no state and does no I/O.
//
// On RoCEv2 a CM MAD is the payload of a UD SEND Only packet from QP 1 to
// QP 1 with the GSI Q_Key 0x80010000 (wire.GSIQKey) after the DETH; the
// layouts here are bit-compatible with the Linux kernel's CM
// (include/rdma/ibta_vol1_c12.h, drivers/infiniband/core/cm.c, cma.c),
// checked against the real rxe captures rping.pcap and
// write_bw_rdmacm.pcap and against Wireshark's dissector.
//
// # Messages
//
// Every message is a struct with every field of its IBA table, a Parse
// method over a whole MAD and an AppendBody method that writes the 232-byte
// body. Parse checks the length (exactly 256 bytes), the base version, the
// class (CM, class version 2), the method (Send), the attribute, and the
// few values IBA reserves (an MRAed or rejected message of 3, an
// information length above its 72 bytes); it never allocates, never
// panics, and its errors are package-level *ParseError values wrapping a
// sentinel (ErrLength, ErrNotCM, ...). Byte fields (GIDs aside) alias the
// parsed MAD. Encoding writes reserved bits as zero and refuses, with a
// *FieldError, a value wider than its field: so a parsed MAD re-encodes to
// its own bytes with only the reserved bits cleared, and the MADs of the
// captures re-encode byte for byte.
//
// Private data has a fixed size per message (REQ 92, MRA 222, REJ 148,
// REP 196, RTU 224, DREQ 220, DREP 224, SIDR_REQ 216, SIDR_REP 136, LAP
// 168, APR 148) and no length on the wire: Parse returns all of it, the
// encoders pad shorter data with zeros. The REJ's ARI and the SIDR_REP's
// and APR's additional information do have a length field; Parse returns
// that many bytes.
//
// # Where the kernel and IBA differ, and what to know
//
//   - A REQ's StartingPSN is the first PSN its sender will receive, not
//     send: the kernel sets the active side's rq_psn and the passive
//     side's sq_psn from it (and the REP's the other way round), which the
//     rping capture confirms.
//   - The kernel puts the ECE vendor ID in reserved bits (REQ bytes 5-7;
//     REP bytes 15, 19, 23; SIDR_REP bytes 6-7 and 11) and the ECE
//     options in the header's attribute modifier of REQ and REP.
//   - A REJ that answers a REQ without a connection behind it (no
//     listener, stale connection) carries LocalCommID 0.
//   - Wireshark 4.0 misreads the REQ's flow label and packet rate (it
//     applies their 32-bit masks to fewer bytes: 0x9ea and 0x1e for the
//     0x9ea0d and 0 of rping.pcap); every other field it shows agrees
//     with this package.
package mad
