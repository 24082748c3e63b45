//go:build !(linux && cgo && goroce_ibverbs)

package ibverbs

// Available reports whether this build has the libibverbs backend.
const Available = false
