// Package rdmacm is goroce's binding to rdma-core's librdmacm, for the
// kernel's RDMA devices (issue 20): the connection manager of the hardware
// backend, under package cm's API as package ibverbs is under verbs'.
//
// The QP is not librdmacm's: the caller creates it with verbs'
// hardware backend (verbs.OpenHardware on the device an ID resolved to,
// DeviceName) and moves it with the attributes librdmacm computes
// (InitQPAttr), passing its number in ConnParam. The active side then gets
// EventConnectResponse instead of EventEstablished, moves its QP to RTR
// and RTS, and calls Establish (librdmacm's rules for an ID without a QP).
//
// Built only with cgo and the goroce_ibverbs tag (and Debian's
// librdmacm-dev); without them Available is false and nothing else is
// defined, so that the core keeps building with CGO_ENABLED=0.
package rdmacm
