"""Proposals in the whitened frame ``φ`` (random walk, pCN, independence, Langevin) and their
tuning (the ESJD-per-cost tuner, the acceptance-rate adapter)."""
