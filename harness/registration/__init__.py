"""What a line promises, as written before any number: the TOML schema (schema), the bar
language (bar, bar_syntax, tokens), the ``[verify]`` claims (verify), ``[integration]``
(integration), ``[replication]`` (replication) and line ids (line_ids).
"""
