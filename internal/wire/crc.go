package wire

import "hash/crc32"

// crcUpdateGeneric is crc32.Update(crc, crc32.IEEETable, p), with short
// inputs (a RETH, the tail of a payload) kept off hash/crc32's dispatch,
// which costs more than the few table steps they need.
func crcUpdateGeneric(crc uint32, p []byte) uint32 {
	if len(p) < 64 {
		return updateSmall(crc, p)
	}
	return crc32.Update(crc, crc32.IEEETable, p)
}
