"""Seeded, reproducible request streams: lengths, arrivals, sessions, traces and presets."""
