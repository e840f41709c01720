"""Launchers: disco-eval and disco-meta-train, and the core they share."""
