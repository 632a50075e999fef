"""Times data-diff (PyPI, not vendored) on the reconcile benchmark's tables.

data-diff compares two tables by key and extra columns, bisecting by
checksums; it knows nothing of an outbox, grace or duplicates, so this is
the authority against the target: messages (id, version) against
search_index (message_id, version). Run it in a virtualenv where
`pip install data-diff` worked (bench/reconcile.md says how it ran):

    python bench/reconcilebench/datadiff.py [authority-url target-url]

(data-diff wants a password in the URL; with trust auth any will do.)
"""
import collections
import resource
import sys
import time

from data_diff import connect_to_table, diff_tables

a = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres:trust@127.0.0.1:5432/reconcile_bench_a"
b = sys.argv[2] if len(sys.argv) > 2 else "postgresql://postgres:trust@127.0.0.1:5432/reconcile_bench_b"
t1 = connect_to_table(a, "messages", "id", extra_columns=("version",))
t2 = connect_to_table(b, "search_index", "message_id", extra_columns=("version",))
start = time.monotonic()
cpu0 = resource.getrusage(resource.RUSAGE_SELF)
signs = collections.Counter()
keys = collections.defaultdict(set)
for sign, row in diff_tables(t1, t2, threaded=True, max_threadpool_size=2):
    signs[sign] += 1
    keys[row[0]].add(sign)
took = time.monotonic() - start
cpu = resource.getrusage(resource.RUSAGE_SELF)
both = sum(1 for s in keys.values() if len(s) == 2)
print(f"data-diff: {took:.2f} s, client CPU {cpu.ru_utime + cpu.ru_stime - cpu0.ru_utime - cpu0.ru_stime:.1f} s, "
      f"peak RSS {cpu.ru_maxrss / 1024:.0f} MB; rows only in the authority (-): {signs['-']}, only in the target (+): {signs['+']}; "
      f"keys differing: {len(keys)}, of which on both sides (a version differs): {both}")
