"""What a run reports: the run collector, the GPU ledger and the metrics computed from them."""
