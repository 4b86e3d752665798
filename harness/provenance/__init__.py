"""Where a number's code came from: the git guard (git, the one import the rest of bench uses,
over gitcmd: running git; tree_state: clean tree and the code commit; ledger_commits: bench's
commits of ledger files; commits: reading history) and the code record (code: committed code
only, private bytecode, installed distributions).
"""
