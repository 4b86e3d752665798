"""Read-only analysis of the ledgers: views, the tidy frame, protocols, history, status,
compare's statistics, route's decision and the report's data. Everything here returns
frozen data or plain values and never prints; ``harness.reporting.render`` shows it."""
