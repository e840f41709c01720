"""Value utilities: EMA normalisation, 2-hot values, V-trace/Retrace, losses."""
