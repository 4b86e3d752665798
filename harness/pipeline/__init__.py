"""One config of a sweep, in whichever process runs it: budget, gate, time, after-timing checks,
rates, result row — one module per stage. It returns row payloads and writes nothing.
"""
