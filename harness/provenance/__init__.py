"""Where a number's code came from: the git guard (git: clean tree, commit, repository root)
and the code record (code: committed code only, private bytecode, installed distributions).
"""
