package verbs

import (
	"testing"
)

func TestTransitionTableShape(t *testing.T) {
	// QPAttrState is never listed (it is always allowed) and no cell lists
	// an attribute as both required and optional.
	for cur := range qpTransitions {
		for next, tr := range qpTransitions[cur] {
			for col := range 3 {
				if (tr.req[col]|tr.opt[col])&QPAttrState != 0 || tr.req[col]&tr.opt[col] != 0 {
					t.Errorf("%v -> %v column %d: req %v opt %v", QPState(cur), QPState(next), col, tr.req[col], tr.opt[col])
				}
				if !tr.valid && (tr.req[col] != 0 || tr.opt[col] != 0) {
					t.Errorf("%v -> %v: attributes on an invalid transition", QPState(cur), QPState(next))
				}
			}
		}
	}
	// Every state can be reset and errored except RESET (only RESET ->
	// RESET and RESET -> INIT are valid from RESET).
	for s := QPStateInit; s <= QPStateErr; s++ {
		if !qpTransitions[s][QPStateReset].valid || !qpTransitions[s][QPStateErr].valid {
			t.Errorf("%v cannot go to RESET or ERR", s)
		}
	}
	if qpTransitions[QPStateReset][QPStateErr].valid {
		t.Error("RESET -> ERR is valid")
	}
}
