//go:build !(linux && cgo && goroce_ibverbs)

package rdmacm

// Available reports whether this build has the librdmacm binding.
const Available = false
