//go:build linux && cgo && goroce_ibverbs

package ibverbs

/*
#include <infiniband/verbs.h>
#include <string.h>

static struct ibv_ah *gr_create_ah(struct ibv_pd *pd, const uint8_t *dgid, uint32_t flow_label, uint8_t sgid_index,
				   uint8_t hop_limit, uint8_t traffic_class, uint8_t sl, uint8_t port)
{
	struct ibv_ah_attr a;

	memset(&a, 0, sizeof(a));
	a.is_global = 1;
	memcpy(a.grh.dgid.raw, dgid, 16);
	a.grh.flow_label = flow_label;
	a.grh.sgid_index = sgid_index;
	a.grh.hop_limit = hop_limit;
	a.grh.traffic_class = traffic_class;
	a.sl = sl;
	a.port_num = port;
	return ibv_create_ah(pd, &a);
}
*/
import "C"

import "unsafe"

// AH is an address handle: a RoCE (global) path for UD sends.
type AH struct{ ah *C.struct_ibv_ah }

// AHAttr is the RoCE part of struct ibv_ah_attr.
type AHAttr struct {
	DGID                       [16]byte
	FlowLabel                  uint32
	SGIDIndex, Port            int
	HopLimit, TrafficClass, SL uint8
}

// CreateAH creates an address handle (ibv_create_ah).
func (pd *PD) CreateAH(a *AHAttr) (*AH, error) {
	ah, err := C.gr_create_ah(pd.pd, (*C.uint8_t)(unsafe.Pointer(&a.DGID[0])), C.uint32_t(a.FlowLabel), C.uint8_t(a.SGIDIndex),
		C.uint8_t(a.HopLimit), C.uint8_t(a.TrafficClass), C.uint8_t(a.SL), C.uint8_t(a.Port))
	if ah == nil {
		return nil, nilErr("ibv_create_ah", err)
	}
	return &AH{ah: ah}, nil
}

// Destroy destroys the address handle.
func (ah *AH) Destroy() error { return errnoOf("ibv_destroy_ah", C.ibv_destroy_ah(ah.ah), nil) }
