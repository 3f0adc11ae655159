"""Measurement tooling (profile, and later bench and calibrate): reached through the
CLI, never imported by `draftwise serve`."""
