"""What a line promises, as written before any number: the TOML schema (schema: the
Registration, load; its tables parsed in sections and cross_checks, its keys and versions in
schema_keys, one value's checks in fields), the bar language (bar, bar_syntax, tokens), the
``[verify]`` claims (verify), ``[integration]`` (integration), ``[replication]`` (replication)
and line ids (line_ids).
"""
