#!/usr/bin/env python3
"""Writes the markdown report of bench/run.sh from the raw outputs.

Usage: report.py RAW_DIR DATE > DATE.md

RAW_DIR holds what run.sh collected: machine.txt, the iperf3 JSON and
sockperf logs of each round (iperf3_rN.json, sockperf_rN.log), the goroce-perf JSON lines (one object per result) and
scale.json. A measurement that is missing or failed shows as "-".
"""

import json
import math
import os
import re
import sys

MB = float(1 << 20)  # perftest's MB/sec is 2^20 bytes a second


def load_lines(path):
    """The JSON objects of a goroce-perf --json output, [] if unusable."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    out.append(json.loads(line))
    except (OSError, ValueError):
        return []
    return out


def client(path, key=None):
    """The client's result lines of a goroce-perf run (the first if key)."""
    lines = [d for d in load_lines(path) if d.get("side") == "client" and "bytes" in d]
    if key is None:
        return lines
    return lines[0].get(key) if lines else None


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def sockperf(path):
    """p50 and p99.9 (usec, half round trips) of a sockperf ping-pong log."""
    pct = {}
    try:
        with open(path) as f:
            for line in f:
                m = re.search(r"percentile\s+([\d.]+)\s*=\s*([\d.]+)", line)
                if m:
                    pct[float(m.group(1))] = float(m.group(2))
    except OSError:
        pass
    return pct.get(50.0), pct.get(99.9)


def round_files(raw, prefix, ext):
    """The per-round outputs PREFIX_rN.EXT of run.sh, in round order, or
    the single PREFIX.EXT of a run without rounds."""
    paths = []
    i = 1
    while os.path.exists(os.path.join(raw, f"{prefix}_r{i}{ext}")):
        paths.append(os.path.join(raw, f"{prefix}_r{i}{ext}"))
        i += 1
    return paths or [os.path.join(raw, prefix + ext)]


def iperf3(path):
    """MB/s received and CPU seconds per GB (client and server) of an iperf3
    -J run."""
    ip = load_json(path)
    if not ip or "sum_received" not in ip.get("end", {}):
        return None, None
    rx = ip["end"]["sum_received"]
    mb = rx["bits_per_second"] / 8 / MB
    cpu = ip["end"].get("cpu_utilization_percent", {})
    secs = rx.get("seconds") or 0
    gb = rx.get("bytes", 0) / 1e9
    if gb <= 0:
        return mb, None
    return mb, (cpu.get("host_total", 0) + cpu.get("remote_total", 0)) / 100 * secs / gb


def median(values):
    """The median of the values that are not None; None if there are none."""
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def fmt(v, digits=2):
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.{digits}f}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def verdict(r, target, higher_better):
    if r is None:
        return "-"
    ok = r >= target if higher_better else r <= target
    return "yes" if ok else "no"


def main():
    raw, day = sys.argv[1], sys.argv[2]
    j = lambda name: os.path.join(raw, name)
    machine = {}
    try:
        with open(j("machine.txt")) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                machine[k] = v
    except OSError:
        pass

    # Bandwidth and CPU, per round (run.sh alternates which goes first).
    bw_rounds = []
    for i, (ipf, gpf) in enumerate(zip(round_files(raw, "iperf3", ".json"),
                                        round_files(raw, "write_bw_64k", ".json")), 1):
        tcp_mb, tcp_cpu = iperf3(ipf)
        bw_rounds.append((i, client(gpf, "bw_average"), tcp_mb,
                          client(gpf, "cpu_sec_per_gb"), tcp_cpu))
    g_mb, tcp_mb, g_cpu, tcp_cpu = (median([r[k] for r in bw_rounds]) for k in (1, 2, 3, 4))

    # Latency, per round.
    lat_rounds = []
    for i, (spf, gpf) in enumerate(zip(round_files(raw, "sockperf", ".log"),
                                        round_files(raw, "write_lat", ".json")), 1):
        sp50, sp999 = sockperf(spf)
        lat_rounds.append((i, client(gpf, "t_typical_usec"), sp50,
                           client(gpf, "p99_9_usec"), sp999))
    gl50, sp50, gl999, sp999 = (median([r[k] for r in lat_rounds]) for k in (1, 2, 3, 4))
    sb50, sb999 = sockperf(j("sockperf_busy.log"))
    gb50 = client(j("write_lat_busy.json"), "t_typical_usec")
    gb999 = client(j("write_lat_busy.json"), "p99_9_usec")

    p = print
    p(f"# goroce benchmarks, {day}")
    p()
    p(f"Machine: {machine.get('cpu', '?')}, {machine.get('cpus', '?')} CPUs "
      f"({machine.get('threads_per_core', '?')} thread(s) per core"
      + (f", {machine['hypervisor']} guest" if machine.get("hypervisor") else "")
      + f"), {fmt(int(machine['mem_mib']) if machine.get('mem_mib', '').isdigit() else None)} MiB; "
      f"{machine.get('os', '?')}, Linux {machine.get('kernel', '?')}; {machine.get('go', '?')}; "
      f"{machine.get('iperf3', '?')}; sockperf {machine.get('sockperf', '?')}. "
      f"goroce {machine.get('commit', '?')}"
      + (f" with {machine['dirty']} uncommitted file(s)" if machine.get("dirty", "0") not in ("", "0") else "")
      + f". Load average before the run: {machine.get('load', '?')}.")
    p()
    p("Everything runs over the loopback interface of this one machine: goroce-perf "
      "with both devices in one process (`--loopback`), iperf3 and sockperf as a client "
      "and a server process. MB is 2^20 bytes (perftest's MB/sec).")
    p()
    p("## Against the kernel (the targets of issue 7)")
    p()
    p("| measure | goroce | kernel | goroce / kernel | target | met |")
    p("|---|---|---|---|---|---|")
    r = median([ratio(x[1], x[2]) for x in bw_rounds])
    p(f"| bandwidth, 64 KiB RDMA WRITE, 1 QP, MTU 4096 vs iperf3 TCP 1 stream (MB/s) | {fmt(g_mb, 1)} | {fmt(tcp_mb, 1)} | {fmt(r)} | >= 1.0 | {verdict(r, 1.0, True)} |")
    r = median([ratio(x[3], x[4]) for x in bw_rounds])
    p(f"| CPU seconds per GB moved (both ends) | {fmt(g_cpu, 3)} | {fmt(tcp_cpu, 3)} | {fmt(r)} | (lower is better) | |")
    r = median([ratio(x[1], x[2]) for x in lat_rounds])
    p(f"| latency p50, 8-byte write_lat vs sockperf UDP ping-pong, blocking (usec, half RTT) | {fmt(gl50)} | {fmt(sp50)} | {fmt(r)} | <= 1.5 | {verdict(r, 1.5, False)} |")
    r = median([ratio(x[3], x[4]) for x in lat_rounds])
    p(f"| latency p99.9, same (usec) | {fmt(gl999)} | {fmt(sp999)} | {fmt(r)} | <= 2 | {verdict(r, 2.0, False)} |")
    r = ratio(gb50, sb50)
    p(f"| latency p50, busy polling: write_lat --busy-poll vs sockperf --nonblocked (usec) | {fmt(gb50)} | {fmt(sb50)} | {fmt(r)} | (for reference) | |")
    r = ratio(gb999, sb999)
    p(f"| latency p99.9, busy polling (usec) | {fmt(gb999)} | {fmt(sb999)} | {fmt(r)} | (for reference) | |")
    p()
    p(f"Each comparison ran in {len(bw_rounds)} round(s) of goroce and the kernel tool side by side "
      "(bandwidth: alternating which went first); the figures are medians over the rounds, "
      "the ratio the median of the rounds' ratios. The rounds:")
    p()
    p("| round | 64 KiB WRITE MB/s | iperf3 MB/s | ratio | CPU s/GB goroce / TCP | write_lat p50 / sockperf p50 (usec) | ratio | p99.9 / p99.9 (usec) | ratio |")
    p("|---|---|---|---|---|---|---|---|---|")
    for k in range(max(len(bw_rounds), len(lat_rounds))):
        b = bw_rounds[k] if k < len(bw_rounds) else (k + 1, None, None, None, None)
        l = lat_rounds[k] if k < len(lat_rounds) else (k + 1, None, None, None, None)
        p(f"| {k + 1} | {fmt(b[1], 1)} | {fmt(b[2], 1)} | {fmt(ratio(b[1], b[2]))} | "
          f"{fmt(b[3], 3)} / {fmt(b[4], 3)} | {fmt(l[1])} / {fmt(l[2])} | {fmt(ratio(l[1], l[2]))} | "
          f"{fmt(l[3])} / {fmt(l[4])} | {fmt(ratio(l[3], l[4]))} |")
    p()
    p("sockperf's smallest message is 14 bytes (its header); goroce's is 8. "
      "sockperf reports half round trips; goroce-perf's write_lat reports half round trips "
      "(t_typical, the median, is its p50). The busy rows compare like with like: "
      "sockperf `--nonblocked` spins in recvfrom, goroce-perf `--busy-poll` spins on the CQ "
      "and the memory it watches, its polls receiving the device's packets (DeviceConfig.BusyPoll). "
      "The targets are the blocking rows; busy polling is shown for reference: a WRITE and its ACK "
      "are two sends per half round trip where a UDP ping-pong has one.")
    p()

    p("## Message rate, 8-byte RDMA WRITE")
    p()
    p("| QPs | Mpps, one WR per post | Mpps, lists of 16 (-l 16) | MB/s (lists) |")
    p("|---|---|---|---|")
    for q in (1, 4, 16):
        lines = client(j(f"write_rate_q{q}.json"))
        mpps = lines[0].get("msg_rate_mpps") if lines else None
        lists = client(j(f"write_rate_q{q}_l16.json"))
        lmpps = lists[0].get("msg_rate_mpps") if lists else None
        mb = lists[0].get("bw_average") if lists else None
        p(f"| {q} | {fmt(mpps, 3)} | {fmt(lmpps, 3)} | {fmt(mb)} |")
    p()

    sc = load_json(j("scale.json"))
    p("## Scale (goroce-scale)")
    p()
    if sc:
        mrs = f"{sc['mrs']:,} of {sc['mr_size']:,} bytes"
        if sc["mrs"] < sc["mrs_requested"]:
            mrs += f" ({sc['mrs_requested']:,} asked: a device's max_mr is {sc['max_mr']:,})"
        p("| measure | value |")
        p("|---|---|")
        p(f"| connected QP pairs on one pair of devices | {sc['qps']:,} (send queue depth {sc['sq_depth']}) |")
        p(f"| memory per QP: Go heap / RSS | {fmt(sc['qp_heap_bytes'], 0)} / {fmt(sc['qp_rss_bytes'], 0)} bytes |")
        p(f"| QP pairs created and connected | {fmt(sc['qp_pairs_per_sec'], 0)} /s |")
        p(f"| memory regions on one device | {mrs} |")
        p(f"| memory per MR: Go heap / RSS | {fmt(sc['mr_heap_bytes'], 0)} / {fmt(sc['mr_rss_bytes'], 0)} bytes |")
        p(f"| registration / deregistration rate | {fmt(sc['reg_mrs_per_sec'], 0)} / {fmt(sc['dereg_mrs_per_sec'], 0)} MRs/s |")
        a = sc["active_qps"]
        r = sc.get("many_over_one")
        p(f"| 64 KiB WRITE throughput, 1 QP | {fmt(sc['one_qp_mb_per_sec'], 1)} MB/s "
          f"({sc['one_qp_retry_timeouts']} retransmission timeouts, {sc['one_qp_udp_rcvbuf_errors']} UDP receive buffer drops) |")
        p(f"| same, {a:,} QPs round robin | {fmt(sc['many_qp_mb_per_sec'], 1)} MB/s on {sc['active_qps_with_traffic']:,} QPs "
          f"({sc['many_qp_retry_timeouts']} retransmission timeouts, {sc['many_qp_udp_rcvbuf_errors']} UDP receive buffer drops) |")
        p(f"| {a:,} QPs / 1 QP (target >= 0.8) | {fmt(r)} ({verdict(r, 0.8, True)}) |")
        for dev, ctr in sorted((sc.get("many_qp_counters") or {}).items()):
            shown = ", ".join(f"{k} {v:,}" for k, v in sorted(ctr.items()) if not k.endswith("_bytes"))
            p(f"| counters of the {dev} device during the {a:,}-QP run | {shown} |")
        p()
        p(f"The MRs are carved in turn from one 64 MiB buffer (-mr-buffer), overlapping, so the "
          "figures per MR are the registration's own cost. Memory per QP counts the QPs of both "
          "devices. The throughput runs keep "
          f"{sc['window']} WRITEs outstanding in total (at most ceil(window/QPs) per QP).")
    else:
        p("goroce-scale failed: see scale.err.")
    p()

    p("## Bandwidth against message size (goroce write_bw -a, 1 QP)")
    p()
    lines = client(j("write_bw_all.json"))
    if lines:
        p("| bytes | MB/s (average) | MB/s (peak) | Mpps | p99.99 post to completion (usec) |")
        p("|---|---|---|---|---|")
        for d in lines:
            p(f"| {d['bytes']:,} | {fmt(d.get('bw_average'))} | {fmt(d.get('bw_peak'))} | "
              f"{fmt(d.get('msg_rate_mpps'), 4)} | {fmt(d.get('p99_99_usec'), 1)} |")
    else:
        p("The -a run failed: see write_bw_all.err.")
    p()
    p(f"iperf3 TCP, one stream, for reference: {fmt(tcp_mb, 1)} MB/s.")
    p()
    for svg, title in (("bw_vs_size.svg", "Bandwidth against message size"),
                       ("latency_cdf.svg", "write_lat latency CDF, 8 bytes")):
        if os.path.exists(j(svg)):
            p(f"![{title}]({day}/{svg})")
            p()
    failed = []
    for name in sorted(os.listdir(raw)):
        if not name.endswith(".err"):
            continue
        base = name[:-4]
        ok = load_json(j("scale.json")) is not None if base == "scale" else bool(client(j(base + ".json")))
        if ok:
            continue
        try:
            with open(j(name)) as f:
                msg = [l.strip() for l in f if l.strip()]
        except OSError:
            msg = []
        failed.append(f"{base}: {msg[-1] if msg else 'no result (killed by its timeout?)'}")
    if failed:
        p("Runs that failed (their cells show -):")
        p()
        for f in failed:
            p(f"- {f}")
        p()
    p(f"Raw outputs: [{day}/]({day}/).")


if __name__ == "__main__":
    main()
