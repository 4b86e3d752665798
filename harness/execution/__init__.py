"""Where configs run: the executor seam, inline, local worker processes, Ray actors, the device lock.

Executors run the per-config pipeline (harness/pipeline) wherever a slot lives and hand its
rows back; they never touch the ledger.
"""
