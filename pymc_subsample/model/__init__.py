"""What is read off a PyMC model and prepared before the first draw: the subsampled
likelihood, GLM detection and the data passes, the reference point, the Laplace frame, the
control variates, the centring of non-centred effects and the ``pms.Data`` sources."""
