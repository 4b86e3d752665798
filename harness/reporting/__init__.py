"""Reporting in two rooms: ``analysis`` reads the ledgers and returns data (never prints);
``render`` is the only code that prints or formats for a terminal or a file."""
