//go:build !amd64 || purego

package wire

// hasFoldAVX512 is false: the 512-bit folding loop is amd64 assembly.
const hasFoldAVX512 = false

// crcUpdate is crc32.Update(crc, crc32.IEEETable, p).
func crcUpdate(crc uint32, p []byte) uint32 {
	return crcUpdateGeneric(crc, p)
}
