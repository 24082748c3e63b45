package verbs

// PostRecvList posts the receive work requests of wrs in order, as
// ibv_post_recv posts a chained list, taking the QP's lock once for all of
// them. Each request is checked and queued as PostRecv does. It returns how
// many were posted: on an error, wrs[n] is the request that failed
// (ibv_post_recv's bad_wr), the ones before it are posted and none after it
// is. PostRecvList does not allocate.
func (qp *QP) PostRecvList(wrs []RecvWR) (int, error) {
	const op = "PostRecvList"
	if qp.hw != nil {
		return hwPostRecv(qp, wrs)
	}
	for i := range wrs {
		if err := qp.checkRecvWR(op, &wrs[i]); err != nil {
			if i == 0 {
				return 0, err
			}
			n, perr := qp.postRecvs(op, wrs[:i])
			if perr != nil {
				return n, perr
			}
			return i, err
		}
	}
	return qp.postRecvs(op, wrs)
}

// postRecvs queues checked receive work requests under one lock.
func (qp *QP) postRecvs(op string, wrs []RecvWR) (int, error) {
	qp.xmu.Lock()
	defer qp.xmu.Unlock()
	for i := range wrs {
		if err := qp.postRecvLocked(op, &wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}
