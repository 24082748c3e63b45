// Package pcap reads and writes classic libpcap capture files and decodes the
// link, IP and UDP layers of captured frames down to the UDP payload, which is
// where a RoCEv2 packet (BTH, extension headers, payload, ICRC) lives.
//
// The file format is the one described by draft-ietf-opsawg-pcap: a 24-byte
// file header followed by records, each a 16-byte record header and the
// captured bytes. Both byte orders and both timestamp resolutions
// (microsecond magic 0xa1b2c3d4, nanosecond magic 0xa1b23c4d) are read; pcapng
// files are recognised and refused with [ErrPcapNG] rather than misparsed.
//
// The package is built for two users: goroce-dump, which walks captures of
// rxe traffic and must survive any damaged input without panicking, and the
// capture tap of internal/netio, which writes every packet the device sends
// or receives and therefore must not allocate per packet. Hence:
//
//   - [Reader.ReadPacket] reads into a caller-supplied buffer and
//     [Reader.Next] into a buffer owned by the Reader; record lengths are
//     bounded by [MaxSnapLen] before anything is allocated.
//   - [Writer.WritePacket] encodes the record header into a buffer inside the
//     Writer.
//   - [DecodeFrame] returns a [Frame] whose byte fields are subslices of the
//     frame, never copies, so that IPHeader and UDPHeader can be fed straight
//     into an ICRC computation.
package pcap
