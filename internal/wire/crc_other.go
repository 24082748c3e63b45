//go:build !amd64 || purego

package wire

// hasFoldAVX512 is false: the 512-bit folding loop is amd64 assembly.
const hasFoldAVX512 = false

// crcUpdate is crc32.Update(crc, crc32.IEEETable, p).
func crcUpdate(crc uint32, p []byte) uint32 {
	return crcUpdateGeneric(crc, p)
}

// icrcFold is not available: see crc_amd64.go.
func icrcFold(hdr, ext, rest []byte) (uint32, bool) { return 0, false }

// foldsHeaders is false: icrcFold is not available.
func foldsHeaders(hdrLen, extLen, restLen int) bool { return false }
