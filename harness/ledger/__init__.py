"""The ledger store: append-only hash-chained JSON Lines (store, format), one typed class per
row kind (rows), the chain and its checks (verify, audit), and the file locks (locks).
"""
