"""Meta-evaluation: acting, the on-device replay, the scanned training loop
and the analysis of its metrics."""
