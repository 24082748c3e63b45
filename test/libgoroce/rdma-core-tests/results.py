#!/usr/bin/env python3
"""Turns the verbose output of rdma-core's run_tests.py (unittest -v) into one
line per test, "module.Class.test STATUS [reason]", sorted, with the totals
last. STATUS is ok, skipped, FAIL or ERROR.

    results.py < run_tests.out > goroce.txt
"""
import re
import sys

test = re.compile(r"^(test_\w+) \(([\w.]+)\)")
status = re.compile(r" \.\.\. (ok|FAIL|ERROR|skipped)(?: (.*))?$")
# A test that prints to stdout splits " ... STATUS" over two lines.
alone = re.compile(r"^(ok|FAIL|ERROR|skipped)(?: (.*))?$")

results = {}
current = None
pending = ""
for line in sys.stdin:
    line = line.rstrip("\n")
    m = test.match(line)
    if m:
        current = m.group(2)
        if not current.endswith(m.group(1)):
            current += "." + m.group(1)
    if current is None:
        continue
    s = status.search(line) or (alone.match(line) if " ... " in pending else None)
    pending = line if " ... " in line else pending
    if s:
        reason = (s.group(2) or "").strip("'\"") if s.group(1) == "skipped" else ""
        results[current] = (s.group(1), reason)
        current = None
        pending = ""

totals = {}
for name in sorted(results):
    st, reason = results[name]
    totals[st] = totals.get(st, 0) + 1
    print(f"{name} {st}" + (f": {reason}" if reason else ""))
print("# total %d: %s" % (len(results), ", ".join(
    f"{totals.get(k, 0)} {k}" for k in ("ok", "skipped", "FAIL", "ERROR"))))
