"""Simulated nodes (kwok's idea): Node objects, their Leases and the pods bound to them, kept alive
against any API server by one process, with no containers behind them."""
