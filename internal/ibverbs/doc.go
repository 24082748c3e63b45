// Package ibverbs is goroce's binding to rdma-core's libibverbs, the
// kernel's RDMA devices (mlx5_0, rxe0, …) seen through the verbs ABI: the
// lowest layer of the hardware backend (issue 20), on which package verbs
// and cm are to offer the same API as on goroce's software devices.
//
// It is built only with cgo and the goroce_ibverbs build tag (and the
// headers of Debian's libibverbs-dev): `go build -tags goroce_ibverbs`.
// Without them Available is false and nothing else is defined, so the core
// keeps building with CGO_ENABLED=0 everywhere.
//
// Memory handed to the device must neither move nor be freed while it is
// registered. The Go heap does not move objects, but frees what nothing
// references and may reuse it; Alloc maps memory outside the heap for
// registered buffers, and Free unmaps it.
//
// The fast paths allocate nothing: a work request is passed to C as plain
// numbers (no Go pointer crosses), and completions are polled into a
// per-CQ array of struct ibv_wc, which holds no Go pointers.
package ibverbs
