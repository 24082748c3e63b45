package nicproto

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// cStructs pairs every Go mirror with its C structure in proto.h.
var cStructs = []struct {
	v     any
	cName string
}{
	{Header{}, "gr_hdr"}, {HelloReq{}, "gr_hello_req"}, {HelloResp{}, "gr_hello_resp"},
	{DevInfo{}, "gr_dev_info"}, {ListResp{}, "gr_list_resp"}, {EnsureReq{}, "gr_ensure_req"},
	{DevAttr{}, "gr_dev_attr"}, {PortAttr{}, "gr_port_attr"}, {OpenReq{}, "gr_open_req"},
	{OpenResp{}, "gr_open_resp"}, {Handle{}, "gr_handle"}, {Piece{}, "gr_piece"},
	{RegMRReq{}, "gr_reg_mr_req"}, {RegMRResp{}, "gr_reg_mr_resp"}, {CompEvent{}, "gr_comp_event"},
	{AsyncEvent{}, "gr_async_event"}, {CreateCQReq{}, "gr_create_cq_req"},
	{CreateCQResp{}, "gr_create_cq_resp"}, {ResizeCQReq{}, "gr_resize_cq_req"},
	{AHAttr{}, "gr_ah_attr"}, {CreateAHReq{}, "gr_create_ah_req"}, {QPCap{}, "gr_qp_cap"},
	{CreateQPReq{}, "gr_create_qp_req"}, {CreateQPResp{}, "gr_create_qp_resp"},
	{QPAttr{}, "gr_qp_attr"}, {ModifyQPReq{}, "gr_modify_qp_req"}, {QueryQPResp{}, "gr_query_qp_resp"},
	{CreateSRQReq{}, "gr_create_srq_req"}, {CreateSRQResp{}, "gr_create_srq_resp"},
	{ModifySRQReq{}, "gr_modify_srq_req"}, {QuerySRQResp{}, "gr_query_srq_resp"},
	{WQHdr{}, "gr_wq_hdr"}, {SGE{}, "gr_sge"}, {SWQE{}, "gr_swqe"}, {RWQE{}, "gr_rwqe"},
	{CQHdr{}, "gr_cq_hdr"}, {CQE{}, "gr_cqe"}, {AllocMWReq{}, "gr_alloc_mw_req"},
	{AllocMWResp{}, "gr_alloc_mw_resp"}, {CMAddr{}, "gr_cm_addr"}, {CMParam{}, "gr_cm_param"},
	{CMReq{}, "gr_cm_req"}, {CMIDInfo{}, "gr_cm_id_info"}, {CMResp{}, "gr_cm_resp"}, {CMEvent{}, "gr_cm_event"},
}

// TestGoLayoutHasNoPadding checks that each mirror's memory layout is its
// sequential encoding: the C padding is all explicit.
func TestGoLayoutHasNoPadding(t *testing.T) {
	for _, s := range cStructs {
		rt := reflect.TypeOf(s.v)
		off := 0
		for i := range rt.NumField() {
			f := rt.Field(i)
			if int(f.Offset) != off {
				t.Errorf("%s.%s at memory offset %d, encoded at %d", rt.Name(), f.Name, f.Offset, off)
			}
			off += binary.Size(reflect.Zero(f.Type).Interface())
		}
		if int(rt.Size()) != off || binary.Size(s.v) != off {
			t.Errorf("%s: size %d, encoded %d", rt.Name(), rt.Size(), off)
		}
	}
}

// TestLayoutMatchesC compiles proto.h and compares every structure's size and
// every field's offset with the Go mirrors, and the constants both declare.
func TestLayoutMatchesC(t *testing.T) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not installed")
	}
	dir := t.TempDir()
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include \"proto.h\"\nint main(void) {\n")
	want := map[string]int{}
	for _, s := range cStructs {
		rt := reflect.TypeOf(s.v)
		fmt.Fprintf(&src, "printf(\"%s %%zu\\n\", sizeof(struct %s));\n", s.cName, s.cName)
		want[s.cName] = int(rt.Size())
		for i := range rt.NumField() {
			f := rt.Field(i)
			c := f.Tag.Get("c")
			if c == "" {
				t.Fatalf("%s.%s has no c tag", rt.Name(), f.Name)
			}
			key := s.cName + "." + c
			fmt.Fprintf(&src, "printf(\"%s %%zu\\n\", offsetof(struct %s, %s));\n", key, s.cName, c)
			want[key] = int(f.Offset)
		}
	}
	consts := map[string]int{
		"GR_PROTO_VERSION": Version, "GR_NAME_MAX": NameMax, "GR_MAX_MSG": MaxMsg,
		"GR_MAX_FDS": MaxFDs, "GR_MAX_PIECES": MaxPieces, "GR_MAX_GIDS": MaxGIDs,
		"GR_OP_HELLO": int(OpHello), "GR_OP_RESIZE_CQ": int(OpResizeCQ), "GR_OP_DEALLOC_MW": int(OpDeallocMW), "GR_OP_CM_QUERY": int(OpCMQuery), "GR_CM_PRIVATE_MAX": CMPrivateMax, "GR_OP_MAX": int(opMax),
		"GR_ARM_NEXT": ArmNext, "GR_ARM_SOLICITED": ArmSolicited, "GR_OBJ_SRQ": ObjSRQ,
	}
	for name, v := range consts {
		fmt.Fprintf(&src, "printf(\"%s %%d\\n\", (int)(%s));\n", name, name)
		want[name] = v
	}
	src.WriteString("return 0;\n}\n")
	cfile := filepath.Join(dir, "layout.c")
	if err := os.WriteFile(cfile, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "layout")
	inc, _ := filepath.Abs("../../libgoroce/src")
	if out, err := exec.Command(cc, "-Wall", "-Werror", "-I", inc, "-o", bin, cfile).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("bad line %q", sc.Text())
		}
		got[k] = n
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: C %d, Go %d", k, got[k], v)
		}
	}
	for k, v := range map[string]int{"gr_wq_hdr": WQHdrSize, "gr_cq_hdr": CQHdrSize, "gr_sge": SGESize,
		"gr_swqe": SWQESize, "gr_rwqe": RWQESize, "gr_cqe": CQESize, "gr_hdr": HeaderSize} {
		if got[k] != v {
			t.Errorf("size constant for %s: C %d, Go %d", k, got[k], v)
		}
	}
}
