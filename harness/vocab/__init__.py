"""The words every room shares: row kinds and rejection tags (outcomes), the metric table
(metrics), device identity (devices). Imports nothing of harness but the base modules.
"""
